//! Speculative decoding: a decoding sequence's pass carries, after its last token, tokens
//! guessed for the ones after it, and the pass's logits at each of them check the guesses; every
//! guess the sequence would have sampled anyway saves a pass.
//!
//! The guesses come from the conversation itself (`ngram`: prompt lookup, no extra weights):
//! agents re-emit the code and tool arguments they have just read; or from a smaller model of
//! the same tokenizer (`draft`, [`draft`]); or from the model's own multi-token-prediction layer
//! (`mtp`, [`mtp`]). Checking samples each row as
//! plain decoding would, with the same sampler, grammar, penalties and random draws, and stops
//! at the first row whose token is not the guess, so the output is token for token what plain
//! decoding gives, greedy or seeded, and its distribution the model's: a guess drawn from no
//! distribution is accepted exactly when the model samples it.

use mlx_rs::{Device, DeviceType};

/// How a model's sequences draft (`corral-worker serve --speculative`), and a request's.
pub use corral_ipc::SpeculativeMethod as Method;

/// The method where the operator chose none, for a model that has a multi-token-prediction
/// layer that runs or not, on this device ([`default_method`]); the log says which and why.
pub fn method_where_it_pays(has_mtp: bool) -> Method {
    let on_gpu = Device::try_default()
        .and_then(|device| device.get_type())
        .is_ok_and(|kind| matches!(kind, DeviceType::Gpu));
    let method = default_method(on_gpu, has_mtp);
    tracing::info!(
        ?method,
        on_gpu,
        has_mtp,
        "speculative decoding: no method configured; on a GPU the model's own MTP layer where it has one, else prompt lookup; none on the CPU"
    );
    method
}

/// Where MLX computes on a GPU, decode passes wait on memory, so that checking guesses costs
/// little beside them: the model's own multi-token-prediction layer guesses where it kept one
/// (one layer's pass a guess, trained for it), else prompt lookup (no extra weights), and
/// `Payoff` stops either where it costs more than it saves. MLX's CPU backend waits on
/// arithmetic, so that a pass checking guesses costs more by each of them: there `Payoff` only
/// keeps it even, and no peer gains either (llama.cpp's prompt lookup and draft models lost
/// 25-80% of their speed in the bench), so none.
pub fn default_method(on_gpu: bool, has_mtp: bool) -> Method {
    match (on_gpu, has_mtp) {
        (false, _) => Method::Off,
        (true, true) => Method::Mtp,
        (true, false) => Method::Ngram,
    }
}

/// A model's speculation: the method and the most tokens a sequence guesses per pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Speculation {
    pub method: Method,
    pub draft_tokens: usize,
}

/// Tokens guessed per pass where the operator sets none: llama.cpp's and vLLM's prompt lookup
/// default to a handful.
pub const DEFAULT_DRAFT_TOKENS: usize = 4;

impl Default for Speculation {
    fn default() -> Self {
        Self {
            method: Method::Off,
            draft_tokens: DEFAULT_DRAFT_TOKENS,
        }
    }
}

/// Whether guessing pays, for this model on this machine under its present load: checking
/// guesses costs a pass more work (several positions per sequence instead of one), which is
/// nearly free where decoding waits on memory (a GPU, a small batch) and costs in full where it
/// waits on arithmetic (a CPU, a full batch). Decode passes are timed per token they generate,
/// with guesses and without, each a running average; a pass guesses while that is as fast, and
/// now and then one tries the other way, so that a change of load shows: 16 passes after the
/// way changed, then twice as many after each try that kept it, up to 256, so that a way that
/// keeps losing costs ever less. A pass with a prompt chunk in it is not timed. Guessing never
/// changes a token, only the speed.
#[derive(Debug)]
pub struct Payoff {
    with: Option<f64>,
    without: Option<f64>,
    /// Passes until the next try of the slower way, and the wait after it.
    until_recheck: u64,
    recheck_every: u64,
    /// The faster way when last compared.
    guessing_won: Option<bool>,
    /// Guess in every pass, whatever the timings: tests that count guesses must not depend on
    /// the machine's speed.
    unguarded: bool,
}

impl Default for Payoff {
    fn default() -> Self {
        Self {
            with: None,
            without: None,
            until_recheck: FIRST_RECHECK,
            recheck_every: FIRST_RECHECK,
            guessing_won: None,
            unguarded: false,
        }
    }
}

/// Passes between tries of the slower way, at first and at most.
const FIRST_RECHECK: u64 = 16;
const LONGEST_RECHECK: u64 = 256;
/// The weight of the newest pass in the running averages.
const NEWEST_WEIGHT: f64 = 0.25;

impl Payoff {
    #[cfg(test)]
    pub fn unguarded() -> Self {
        Self {
            unguarded: true,
            ..Self::default()
        }
    }

    /// Whether the next pass's sequences guess.
    pub fn guess_now(&mut self) -> bool {
        if self.unguarded {
            return true;
        }
        let (Some(with), Some(without)) = (self.with, self.without) else {
            // Guessing is timed first, then plain decoding.
            return self.with.is_none();
        };
        let guessing_wins = with <= without;
        if self.guessing_won != Some(guessing_wins) {
            // The way changed: look again soon.
            self.guessing_won = Some(guessing_wins);
            self.recheck_every = FIRST_RECHECK;
            self.until_recheck = FIRST_RECHECK;
        }
        self.until_recheck -= 1;
        if self.until_recheck > 0 {
            return guessing_wins;
        }
        self.recheck_every = (self.recheck_every * 2).min(LONGEST_RECHECK);
        self.until_recheck = self.recheck_every;
        !guessing_wins
    }

    /// A decode pass that `guessed` (some sequence's input held guesses) took `seconds` to
    /// generate `tokens` tokens.
    pub fn record(&mut self, guessed: bool, seconds: f64, tokens: usize) {
        if tokens == 0 {
            return;
        }
        let per_token = seconds / tokens as f64;
        let average = if guessed {
            &mut self.with
        } else {
            &mut self.without
        };
        *average = Some(match *average {
            Some(old) => old + NEWEST_WEIGHT * (per_token - old),
            None => per_token,
        });
    }
}

/// What plain decoding did with one row of a pass that checks guesses.
pub struct Drawn {
    /// The token it sampled (or was forced to), if it sampled one.
    pub token: Option<u32>,
    /// Whether the sequence goes on after it.
    pub goes_on: bool,
}

/// Checks guesses row by row (`rows`: after the last token, then after each guess): `draw`
/// does with a row what plain decoding would, and the guess after it stands when the token
/// drawn is it. Rows after the first guess refused, or after the sequence ends, are never
/// drawn from. Returns the guesses confirmed.
///
/// For a guess drawn from a draft distribution `q`, speculative sampling keeps it with
/// probability `min(1, p/q)` and otherwise draws from `p - q`'s positive part, renormalized; every
/// guess here is a draft's certain choice (`q` one-hot: prompt lookup, a draft model's argmax),
/// for which that is exactly "draw from `p`, keep the guess if the draw is it", with the same
/// random draws as plain decoding.
pub fn confirmed_guesses<R>(
    rows: impl IntoIterator<Item = R>,
    guesses: &[u32],
    mut draw: impl FnMut(R) -> Drawn,
) -> usize {
    let mut confirmed = 0;
    for (index, row) in rows.into_iter().enumerate() {
        let drawn = draw(row);
        let stands = drawn.token.is_some() && drawn.token == guesses.get(index).copied();
        confirmed += usize::from(stands);
        if !stands || !drawn.goes_on {
            break;
        }
    }
    confirmed
}

/// The longest and shortest run of last tokens looked up.
const LONGEST_NGRAM: usize = 3;
const SHORTEST_NGRAM: usize = 2;

/// Prompt lookup: the tokens that followed the latest earlier occurrence of `history`'s last
/// few tokens (the longest run that occurred before, of 3 down to 2), at most `count` of them.
pub fn ngram_draft(history: &[u32], count: usize) -> &[u32] {
    for length in (SHORTEST_NGRAM..=LONGEST_NGRAM).rev() {
        let Some(start) = history.len().checked_sub(length) else {
            continue;
        };
        let tail = &history[start..];
        // The latest occurrence that has a token after it, which the tail itself has not.
        let found = history[..history.len() - 1]
            .windows(length)
            .rposition(|window| window == tail);
        if let Some(position) = found {
            let from = position + length;
            return &history[from..(from + count).min(history.len())];
        }
    }
    &[]
}

pub mod draft;
pub mod mtp;

#[cfg(test)]
mod tests;
