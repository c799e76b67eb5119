use super::*;

fn seeded(seed: u64, adjust: impl FnOnce(&mut SamplingParams)) -> SamplingParams {
    let mut params = SamplingParams {
        seed: Some(seed),
        ..SamplingParams::default()
    };
    adjust(&mut params);
    params
}

fn draws(params: SamplingParams, logits: &[f32], n: usize) -> Vec<u32> {
    let mut sampler = Sampler::new(params).expect("valid params");
    (0..n)
        .map(|_| sampler.sample(logits, &[]).expect("samplable logits"))
        .collect()
}

fn greedy(logits: &[f32], history: &[u32], adjust: impl FnOnce(&mut SamplingParams)) -> u32 {
    let params = seeded(0, |p| {
        p.temperature = 0.0;
        adjust(p);
    });
    let mut sampler = Sampler::new(params).expect("valid params");
    sampler.sample(logits, history).expect("samplable logits")
}

fn frequencies(draws: &[u32], vocab: usize) -> Vec<f64> {
    let mut counts = vec![0usize; vocab];
    for &d in draws {
        counts[d as usize] += 1;
    }
    counts
        .into_iter()
        .map(|c| c as f64 / draws.len() as f64)
        .collect()
}

fn ln(probs: &[f32]) -> Vec<f32> {
    probs.iter().map(|p| p.ln()).collect()
}

#[test]
fn default_params_are_openai_defaults() {
    let p = SamplingParams::default();
    assert_eq!(
        (p.temperature, p.top_p, p.top_k, p.min_p),
        (1.0, 1.0, 0, 0.0)
    );
    assert_eq!((p.repetition_penalty, p.repetition_context), (1.0, 64));
    assert_eq!(p.seed, None);
}

#[test]
fn temperature_zero_picks_the_first_maximum() {
    assert_eq!(greedy(&[0.1, 3.0, -2.0, 3.0], &[], |_| {}), 1);
}

#[test]
fn temperature_zero_does_not_depend_on_the_seed() {
    let logits = [0.2, 0.1, 0.3, 0.25];
    for seed in 0..20 {
        assert_eq!(
            draws(seeded(seed, |p| p.temperature = 0.0), &logits, 5),
            [2; 5]
        );
    }
}

#[test]
fn same_seed_gives_the_same_sequence() {
    let logits: Vec<f32> = (0..1000).map(|i| (i % 17) as f32 * 0.1).collect();
    let params = seeded(99, |p| {
        p.top_p = 0.9;
        p.top_k = 50;
    });
    assert_eq!(
        draws(params.clone(), &logits, 200),
        draws(params, &logits, 200)
    );
}

#[test]
fn different_seeds_give_different_sequences() {
    let logits = vec![0.0; 100];
    assert_ne!(
        draws(seeded(1, |_| {}), &logits, 50),
        draws(seeded(2, |_| {}), &logits, 50)
    );
}

#[test]
fn unfiltered_draws_follow_the_softmax() {
    let freq = frequencies(&draws(seeded(3, |_| {}), &ln(&[0.5, 0.3, 0.2]), 20_000), 3);
    for (got, want) in freq.iter().zip([0.5, 0.3, 0.2]) {
        assert!((got - want).abs() < 0.02, "{freq:?}");
    }
}

#[test]
fn top_k_zero_and_top_p_one_are_no_ops() {
    let logits: Vec<f32> = (0..50).map(|i| (i as f32 * 0.37).sin()).collect();
    let plain = draws(seeded(5, |_| {}), &logits, 300);
    let explicit = seeded(5, |p| {
        p.top_k = logits.len();
        p.top_p = 1.0;
        p.min_p = 0.0;
    });
    assert_eq!(plain, draws(explicit, &logits, 300));
}

#[test]
fn low_temperature_sharpens_and_high_temperature_flattens() {
    let logits = [1.0, 0.5];
    let cold = frequencies(
        &draws(seeded(4, |p| p.temperature = 0.05), &logits, 2000),
        2,
    );
    assert!(cold[0] > 0.99, "{cold:?}");
    let hot = frequencies(
        &draws(seeded(4, |p| p.temperature = 100.0), &logits, 4000),
        2,
    );
    assert!((hot[0] - 0.5).abs() < 0.05, "{hot:?}");
}

#[test]
fn top_k_keeps_only_the_k_best() {
    let logits = [0.0, 0.4, 0.1, 0.3, 0.2, 0.5];
    let got = draws(seeded(6, |p| p.top_k = 3), &logits, 2000);
    assert!(got.iter().all(|t| [1, 3, 5].contains(t)), "{got:?}");
    let freq = frequencies(&got, logits.len());
    assert!([1, 3, 5].iter().all(|&t| freq[t] > 0.2), "{freq:?}");
}

#[test]
fn top_k_one_is_greedy() {
    let logits = [0.3, 0.2, 0.31, 0.1];
    assert!(
        draws(seeded(7, |p| p.top_k = 1), &logits, 200)
            .iter()
            .all(|&t| t == 2)
    );
}

#[test]
fn top_p_keeps_the_smallest_set_reaching_the_mass() {
    let logits = ln(&[0.15, 0.5, 0.05, 0.3]);
    let got = draws(seeded(8, |p| p.top_p = 0.75), &logits, 2000);
    let freq = frequencies(&got, 4);
    assert_eq!((freq[0], freq[2]), (0.0, 0.0), "{freq:?}");
    assert!(
        (freq[1] - 0.625).abs() < 0.04,
        "renormalized over 0.5 + 0.3: {freq:?}"
    );
}

#[test]
fn top_p_zero_keeps_the_top_token() {
    let logits = [0.3, 0.2, 0.31, 0.1];
    assert!(
        draws(seeded(9, |p| p.top_p = 0.0), &logits, 200)
            .iter()
            .all(|&t| t == 2)
    );
}

#[test]
fn top_p_over_a_large_vocabulary_keeps_exactly_the_nucleus() {
    // Weights e^(-i / 10^4) over 150k tokens: half the mass lies in the first ln 2 * 10^4.
    let logits: Vec<f32> = (0..150_000).map(|i| -(i as f32) * 1e-4).collect();
    let got = draws(seeded(10, |p| p.top_p = 0.5), &logits, 300);
    assert!(got.iter().all(|&t| t <= 6932), "{:?}", got.iter().max());
    assert!(
        got.iter().any(|&t| t > 5000),
        "the whole nucleus is drawn from"
    );
}

#[test]
fn top_k_then_top_p_work_on_the_renormalized_survivors() {
    // top_k = 2 keeps 0.3 and 0.26, renormalized to 0.54 / 0.46; top_p 0.5 keeps the first.
    let logits = ln(&[0.3, 0.2, 0.26, 0.24]);
    let got = draws(
        seeded(11, |p| {
            p.top_k = 2;
            p.top_p = 0.5;
        }),
        &logits,
        300,
    );
    assert!(got.iter().all(|&t| t == 0), "{got:?}");
}

#[test]
fn tokens_tied_at_the_top_k_threshold_are_kept() {
    let got = draws(seeded(15, |p| p.top_k = 1), &[1.0, 0.0, 1.0], 400);
    let freq = frequencies(&got, 3);
    assert!(freq[1] == 0.0 && freq[0] > 0.4 && freq[2] > 0.4, "{freq:?}");
}

#[test]
fn min_p_drops_tokens_far_below_the_best() {
    let logits = ln(&[0.6, 0.3, 0.1]);
    let got = draws(seeded(12, |p| p.min_p = 0.2), &logits, 2000);
    let freq = frequencies(&got, 3);
    assert_eq!(freq[2], 0.0, "0.1 < 0.2 * 0.6: {freq:?}");
    assert!(freq[1] > 0.2, "{freq:?}");
}

#[test]
fn repetition_penalty_divides_positive_logits() {
    assert_eq!(greedy(&[2.0, 1.9], &[], |p| p.repetition_penalty = 2.0), 0);
    assert_eq!(greedy(&[2.0, 1.9], &[0], |p| p.repetition_penalty = 2.0), 1);
}

#[test]
fn repetition_penalty_multiplies_negative_logits() {
    assert_eq!(
        greedy(&[-1.0, -1.5], &[0], |p| p.repetition_penalty = 2.0),
        1
    );
}

#[test]
fn repetition_penalty_counts_each_token_once() {
    // Once: 4.0 / 2 = 2.0 still beats 1.5; three times would give 0.5.
    assert_eq!(
        greedy(&[4.0, 1.5], &[0, 0, 0], |p| p.repetition_penalty = 2.0),
        0
    );
}

#[test]
fn presence_penalty_subtracts_once_however_often_a_token_was_seen() {
    // 2.0 - 0.5 = 1.5 < 1.6, whether token 0 was seen once or three times.
    assert_eq!(greedy(&[2.0, 1.6], &[0], |p| p.presence_penalty = 0.5), 1);
    assert_eq!(
        greedy(&[2.0, 1.4], &[0, 0, 0], |p| p.presence_penalty = 0.5),
        0
    );
}

#[test]
fn frequency_penalty_subtracts_once_per_occurrence() {
    // Seen twice: 2.0 - 2 * 0.3 = 1.4 < 1.5; seen once: 1.7 > 1.5.
    assert_eq!(
        greedy(&[2.0, 1.5], &[0, 0], |p| p.frequency_penalty = 0.3),
        1
    );
    assert_eq!(greedy(&[2.0, 1.5], &[0], |p| p.frequency_penalty = 0.3), 0);
}

#[test]
fn penalties_outside_openais_range_are_refused() {
    let params = seeded(0, |p| p.presence_penalty = 2.5);
    assert_eq!(
        Sampler::new(params).unwrap_err(),
        InvalidParams::PresencePenalty(2.5)
    );
    let params = seeded(0, |p| p.frequency_penalty = -3.0);
    assert_eq!(
        Sampler::new(params).unwrap_err(),
        InvalidParams::FrequencyPenalty(-3.0)
    );
}

#[test]
fn repetition_penalty_only_sees_the_recent_context() {
    let adjust = |p: &mut SamplingParams| {
        p.repetition_penalty = 2.0;
        p.repetition_context = 2;
    };
    assert_eq!(greedy(&[2.0, 1.9, 0.0], &[0, 2, 2], adjust), 0);
    assert_eq!(greedy(&[2.0, 1.9, 0.0], &[2, 0, 2], adjust), 1);
}

#[test]
fn repetition_penalty_ignores_ids_past_the_vocabulary() {
    assert_eq!(
        greedy(&[1.0, 0.0], &[7, u32::MAX], |p| p.repetition_penalty = 2.0),
        0
    );
}

#[test]
fn nan_logits_are_never_chosen() {
    let logits = [f32::NAN, 0.0, f32::NAN, -1.0];
    assert_eq!(greedy(&logits, &[], |_| {}), 1);
    assert!(
        draws(seeded(13, |_| {}), &logits, 500)
            .iter()
            .all(|&t| t == 1 || t == 3)
    );
}

#[test]
fn an_infinite_logit_takes_all_the_mass() {
    let logits = [0.0, f32::INFINITY, 1.0];
    assert_eq!(greedy(&logits, &[1], |p| p.repetition_penalty = 0.5), 1);
    assert!(
        draws(seeded(14, |_| {}), &logits, 100)
            .iter()
            .all(|&t| t == 1)
    );
}

#[test]
fn empty_logits_are_an_error() {
    for temperature in [0.0, 1.0] {
        let mut sampler = Sampler::new(seeded(0, |p| p.temperature = temperature)).unwrap();
        assert_eq!(sampler.sample(&[], &[]), Err(SampleError::EmptyLogits));
    }
}

#[test]
fn all_nan_logits_are_an_error() {
    for temperature in [0.0, 1.0] {
        let mut sampler = Sampler::new(seeded(0, |p| p.temperature = temperature)).unwrap();
        let got = sampler.sample(&[f32::NAN, f32::NEG_INFINITY], &[]);
        assert_eq!(got, Err(SampleError::NoCandidate { vocab: 2 }));
    }
}

#[test]
fn out_of_range_params_are_rejected() {
    let bad = [
        seeded(0, |p| p.temperature = -0.1),
        seeded(0, |p| p.temperature = f32::NAN),
        seeded(0, |p| p.top_p = 1.5),
        seeded(0, |p| p.top_p = f32::NAN),
        seeded(0, |p| p.min_p = -0.1),
        seeded(0, |p| p.repetition_penalty = 0.0),
        seeded(0, |p| p.repetition_penalty = f32::INFINITY),
    ];
    for params in bad {
        assert!(Sampler::new(params.clone()).is_err(), "{params:?}");
    }
}
