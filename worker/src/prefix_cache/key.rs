//! What identifies a cached block: the model it was computed by (its fingerprint) and every
//! token from the start of the prompt to the block's end, as a SHA-256 chain over blocks, so one
//! key names one whole prefix and two prompts share exactly the blocks of their common prefix.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

use sha2::{Digest, Sha256};

use super::disk::{BlockKey, Fingerprint};

/// Bytes sampled from each weight file, spread over it: enough to tell two models with the same
/// shapes apart (fixtures of one size differ only in values) without reading gigabytes at start.
const SAMPLES_PER_FILE: u64 = 64;
const SAMPLE_BYTES: usize = 4096;

/// The model's identity. A directory: `config.json`, and for each safetensors file its name,
/// size, header and samples of its payload. A GGUF file: the same of the one file (its header,
/// which holds the hyperparameters and the tokenizer, is in the first sample).
pub fn fingerprint(model: &Path) -> io::Result<Fingerprint> {
    let mut hasher = Sha256::new();
    hasher.update(b"corral prefix cache v1\0");
    let weights = if model.is_file() {
        vec![model.to_path_buf()]
    } else {
        hasher.update(std::fs::read(model.join("config.json"))?);
        let mut files: Vec<_> = std::fs::read_dir(model)?
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "safetensors"))
            .collect();
        files.sort();
        files
    };
    for path in weights {
        let mut file = File::open(&path)?;
        let len = file.metadata()?.len();
        hasher.update(
            path.file_name()
                .map(|name| name.as_encoded_bytes())
                .unwrap_or_default(),
        );
        hasher.update(len.to_le_bytes());
        let mut sample = vec![0u8; SAMPLE_BYTES];
        for index in 0..SAMPLES_PER_FILE {
            file.seek(SeekFrom::Start(len * index / SAMPLES_PER_FILE))?;
            let read = read_up_to(&mut file, &mut sample)?;
            hasher.update(&sample[..read]);
        }
    }
    Ok(hasher.finalize().into())
}

fn read_up_to(file: &mut File, buffer: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buffer.len() {
        match file.read(&mut buffer[filled..])? {
            0 => break,
            read => filled += read,
        }
    }
    Ok(filled)
}

/// The key of each whole block of `tokens`, in order: block `i`'s key covers tokens
/// `0..(i + 1) * block_tokens`.
pub fn block_keys(fingerprint: &Fingerprint, tokens: &[u32], block_tokens: usize) -> Vec<BlockKey> {
    let mut parent: BlockKey = *fingerprint;
    tokens
        .chunks_exact(block_tokens)
        .map(|block| {
            let mut hasher = Sha256::new();
            hasher.update(fingerprint);
            hasher.update(parent);
            for token in block {
                hasher.update(token.to_le_bytes());
            }
            parent = hasher.finalize().into();
            parent
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_chain_over_the_whole_prefix_and_skip_a_partial_block() {
        let model = [7u8; 32];
        let tokens: Vec<u32> = (0..10).collect();
        let keys = block_keys(&model, &tokens, 4);
        assert_eq!(keys.len(), 2);
        // Same first block, different second: the first key is shared, the second is not.
        let mut other = tokens.clone();
        other[5] = 99;
        let other_keys = block_keys(&model, &other, 4);
        assert_eq!(keys[0], other_keys[0]);
        assert_ne!(keys[1], other_keys[1]);
        // The same block after a different prefix has a different key.
        let shifted: Vec<u32> = [vec![42; 4], tokens[4..8].to_vec()].concat();
        assert_ne!(block_keys(&model, &shifted, 4)[1], keys[1]);
        // Another model, other keys.
        assert_ne!(block_keys(&[8u8; 32], &tokens, 4)[0], keys[0]);
    }

    #[test]
    fn a_gguf_files_fingerprint_covers_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.gguf");
        let mut bytes = vec![0u8; 1 << 20];
        std::fs::write(&path, &bytes).unwrap();
        let first = fingerprint(&path).unwrap();
        assert_eq!(fingerprint(&path).unwrap(), first);
        // One weight changed in the middle of the file: another model.
        bytes[1 << 19] = 1;
        std::fs::write(&path, &bytes).unwrap();
        assert_ne!(fingerprint(&path).unwrap(), first);
    }
}
