//! Which of its earlier positions a query sees: all of them (no window), the last few (a sliding
//! window), or those of its own fixed-size chunk (chunked attention). One definition for the
//! attention block, MLX's masks and the host kernels, so all three cut the keys alike.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    /// The query and the `n - 1` positions before it (Gemma 3, gpt-oss).
    Sliding(i32),
    /// The positions of the query's own chunk of `n` (`[n·k, n·(k+1))`) up to itself (Llama 4).
    /// Unlike a sliding window's, its cut depends on absolute positions, so its cache holds them
    /// all from position 0.
    Chunk(i32),
}

impl Window {
    /// A sliding window's size; a chunk's cache keeps every position.
    pub fn sliding(self) -> Option<i32> {
        match self {
            Self::Sliding(size) => Some(size),
            Self::Chunk(_) => None,
        }
    }

    /// The first position the query at `position` sees.
    pub fn first(self, position: i32) -> i32 {
        match self {
            Self::Sliding(size) => (position - size.max(1) + 1).max(0),
            Self::Chunk(size) => position - position % size.max(1),
        }
    }
}
