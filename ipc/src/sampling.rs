//! Sampling defaults as one source states them: a model's `generation_config.json` or GGUF
//! metadata (read by the worker's `describe`), an Ollama params layer, or corral's own
//! `[models.ID]` configuration. Each field is `None` where that source says nothing, so the
//! supervisor can take every field from the first source that has it.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SamplingValues {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    /// 0 is off.
    pub top_k: Option<u32>,
    pub min_p: Option<f32>,
    pub repetition_penalty: Option<f32>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    /// The default answer length.
    pub max_tokens: Option<u32>,
    pub stop: Option<Vec<String>>,
}

impl SamplingValues {
    /// Whether the source states nothing at all.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

impl SamplingValues {
    /// The same values without those the worker would refuse, and a message for each one
    /// dropped (`top_p 1.5 is not between 0 and 1`), so a source with one bad value still gives
    /// the others.
    pub fn without_invalid(mut self) -> (Self, Vec<String>) {
        let mut problems = Vec::new();
        let mut check = |name: &str, value: &mut Option<f32>, ok: fn(f32) -> bool, want: &str| {
            if let Some(v) = *value
                && !ok(v)
            {
                problems.push(format!("{name} {v} is not {want}"));
                *value = None;
            }
        };
        check(
            "temperature",
            &mut self.temperature,
            |v| v.is_finite() && v >= 0.0,
            "a number >= 0",
        );
        check(
            "top_p",
            &mut self.top_p,
            |v| (0.0..=1.0).contains(&v),
            "between 0 and 1",
        );
        check(
            "min_p",
            &mut self.min_p,
            |v| (0.0..=1.0).contains(&v),
            "between 0 and 1",
        );
        check(
            "repetition_penalty",
            &mut self.repetition_penalty,
            |v| v.is_finite() && v > 0.0,
            "a number > 0",
        );
        for (name, value) in [
            ("presence_penalty", &mut self.presence_penalty),
            ("frequency_penalty", &mut self.frequency_penalty),
        ] {
            check(
                name,
                value,
                |v| (-2.0..=2.0).contains(&v),
                "between -2 and 2",
            );
        }
        if self.max_tokens == Some(0) {
            problems.push("max_tokens 0 is not at least 1".to_owned());
            self.max_tokens = None;
        }
        if self
            .stop
            .as_ref()
            .is_some_and(|stop| stop.iter().any(String::is_empty))
        {
            problems.push("stop holds an empty string".to_owned());
            self.stop = None;
        }
        (self, problems)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_values_are_dropped_one_by_one_with_a_message_each() {
        let values = SamplingValues {
            temperature: Some(0.6),
            top_p: Some(1.5),
            max_tokens: Some(0),
            stop: Some(vec![String::new()]),
            presence_penalty: Some(-2.0),
            ..SamplingValues::default()
        };
        let (kept, problems) = values.without_invalid();
        assert_eq!(
            kept,
            SamplingValues {
                temperature: Some(0.6),
                presence_penalty: Some(-2.0),
                ..SamplingValues::default()
            }
        );
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems[0].contains("top_p 1.5"), "{problems:?}");
    }
}
