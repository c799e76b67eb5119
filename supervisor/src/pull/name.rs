//! What a user asks to pull, `ORG/NAME[@REVISION]`, checked before it reaches a URL or a path.
//!
//! Both parts of the id and every segment of the revision become path components of the cache
//! (`models--ORG--NAME`, `refs/REVISION`), so each is held to the hub's own rules for repository
//! names, in ASCII: letters, digits, `.`, `_`, `-`, starting and ending with a letter or digit,
//! and neither `--` (the cache's separator) nor `..` anywhere.

use std::fmt;

use super::PullError;

/// The hub's longest repository name.
const MAX_PART: usize = 96;
/// Branch and tag names longer than this are not names anyone types.
const MAX_REVISION: usize = 256;

/// A validated `ORG/NAME`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoId {
    org: String,
    name: String,
}

impl RepoId {
    /// The cache folder's name: `models--ORG--NAME`.
    pub fn folder(&self) -> String {
        format!("models--{}--{}", self.org, self.name)
    }
}

impl fmt::Display for RepoId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.org, self.name)
    }
}

/// A validated revision: a branch, a tag or a commit, one or more `/`-separated segments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revision(String);

impl Revision {
    pub fn main() -> Self {
        Self("main".to_owned())
    }

    pub fn parse(text: &str) -> Result<Self, PullError> {
        let valid = !text.is_empty()
            && text.len() <= MAX_REVISION
            && text.split('/').all(|segment| {
                !segment.is_empty()
                    && segment != "."
                    && !segment.contains("..")
                    && segment.chars().all(allowed)
            });
        if !valid {
            return Err(PullError::InvalidRevision(text.to_owned()));
        }
        Ok(Self(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The revision as one URL path segment (`refs/pr/1` is `refs%2Fpr%2F1`, as the hub expects).
    pub fn url_segment(&self) -> String {
        self.0.replace('/', "%2F")
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `ORG/NAME` with its optional `@REVISION`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelRef {
    pub repo: RepoId,
    pub revision: Option<Revision>,
}

impl ModelRef {
    pub fn parse(text: &str) -> Result<Self, PullError> {
        let (id, revision) = match text.split_once('@') {
            Some((id, revision)) => (id, Some(Revision::parse(revision)?)),
            None => (text, None),
        };
        let invalid = || PullError::InvalidName(text.to_owned());
        let (org, name) = id.split_once('/').ok_or_else(invalid)?;
        if !valid_part(org) || !valid_part(name) {
            return Err(invalid());
        }
        Ok(Self {
            repo: RepoId {
                org: org.to_owned(),
                name: name.to_owned(),
            },
            revision,
        })
    }
}

fn valid_part(part: &str) -> bool {
    let edges_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    !part.is_empty()
        && part.len() <= MAX_PART
        && part.chars().all(allowed)
        && edges_ok(part.chars().next())
        && edges_ok(part.chars().last())
        && !part.contains("--")
        && !part.contains("..")
}

fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn org_name_and_revision_parse() {
        let parsed = ModelRef::parse("mlx-community/Qwen3-0.6B-4bit@v1.0").unwrap();
        assert_eq!(parsed.repo.to_string(), "mlx-community/Qwen3-0.6B-4bit");
        assert_eq!(
            parsed.repo.folder(),
            "models--mlx-community--Qwen3-0.6B-4bit"
        );
        assert_eq!(parsed.revision.unwrap().as_str(), "v1.0");
        let plain = ModelRef::parse("HuggingFaceTB/SmolLM2-135M-Instruct").unwrap();
        assert_eq!(plain.revision, None);
        let pr = ModelRef::parse("a/b@refs/pr/1").unwrap();
        assert_eq!(pr.revision.unwrap().url_segment(), "refs%2Fpr%2F1");
    }

    #[test]
    fn names_that_could_become_other_paths_are_refused() {
        for bad in [
            "../x",
            "a/b/c",
            "/abs/x",
            "a/..",
            "a/.hidden",
            "x",
            "a/",
            "/b",
            "a//b",
            "a/b c",
            "a--b/c",
            "a/b--c",
            "a/b..c",
            "a\\b/c",
            "a/b/",
            "org/name\n",
            "ørg/name",
        ] {
            assert!(
                matches!(ModelRef::parse(bad), Err(PullError::InvalidName(_))),
                "{bad:?} was accepted"
            );
        }
    }

    #[test]
    fn revisions_that_could_escape_refs_are_refused() {
        for bad in [
            "", "..", "../main", "a/../b", "/main", "main/", "a//b", ".", "a b",
        ] {
            assert!(
                matches!(Revision::parse(bad), Err(PullError::InvalidRevision(_))),
                "{bad:?} was accepted"
            );
        }
        assert!(ModelRef::parse("a/b@").is_err());
        assert!(ModelRef::parse("a/b@x@y").is_err());
    }
}
