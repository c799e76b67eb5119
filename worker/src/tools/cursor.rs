//! A read position in a call's text, for the readers of calls written in a notation of their own
//! (`gemma4_call`, `pythonic_call`), which add their values' grammar on top.

pub(super) struct Cursor<'a> {
    text: &'a str,
    /// Bytes read so far.
    pub(super) at: usize,
}

impl<'a> Cursor<'a> {
    pub(super) fn new(text: &'a str) -> Self {
        Self { text, at: 0 }
    }

    pub(super) fn rest(&self) -> &'a str {
        &self.text[self.at..]
    }

    pub(super) fn skip_space(&mut self) {
        let rest = self.rest();
        self.at += rest.len() - rest.trim_start().len();
    }

    /// Consumes `token` (after whitespace) if it is next.
    pub(super) fn eat(&mut self, token: &str) -> bool {
        self.skip_space();
        if self.rest().starts_with(token) {
            self.at += token.len();
            true
        } else {
            false
        }
    }

    pub(super) fn expect(&mut self, token: &str, what: &str) -> Result<(), String> {
        if self.eat(token) {
            Ok(())
        } else {
            Err(format!(
                "expected {token:?} {what}, found {:?}",
                self.preview()
            ))
        }
    }

    /// The next few characters, for an error message.
    pub(super) fn preview(&self) -> &'a str {
        let rest = self.rest();
        let end = rest
            .char_indices()
            .nth(20)
            .map_or(rest.len(), |(index, _)| index);
        &rest[..end]
    }
}
