use super::*;

#[test]
fn the_tokens_after_the_latest_earlier_occurrence_are_the_draft() {
    // `7 8 9` occurred twice before; the latest is followed by `4 5`.
    let history = [7, 8, 9, 1, 2, 7, 8, 9, 4, 5, 6, 7, 8, 9];
    assert_eq!(ngram_draft(&history, 3), &[4, 5, 6]);
    assert_eq!(ngram_draft(&history, 1), &[4]);
    // A draft stops at the end of the history.
    let history = [1, 2, 3, 1, 2];
    assert_eq!(ngram_draft(&history, 4), &[3, 1, 2]);
}

#[test]
fn the_longest_run_that_occurred_wins_and_nothing_is_drafted_without_one() {
    // The last three (`5 1 2`) never occurred; the last two (`1 2`) did, followed by 9.
    let history = [1, 2, 9, 5, 1, 2];
    assert_eq!(ngram_draft(&history, 2), &[9, 5]);
    // A single repeated token is not enough to go on.
    assert!(ngram_draft(&[4, 3, 2, 1, 4], 2).is_empty());
    assert!(ngram_draft(&[1], 2).is_empty());
    assert!(ngram_draft(&[], 2).is_empty());
}

#[test]
fn guessing_goes_on_while_it_is_as_fast_and_the_slower_way_is_tried_ever_less_often() {
    let mut payoff = Payoff::default();
    // Guessing is timed first, then plain decoding.
    assert!(payoff.guess_now());
    payoff.record(true, 0.3, 3);
    assert!(!payoff.guess_now());
    payoff.record(false, 0.05, 1);
    // Guessing at 0.1 s a token loses to 0.05 s: passes go plain, but for rechecks after 16,
    // then 32, then 64 passes.
    let guessed: Vec<usize> = (1..=112).filter(|_| payoff.guess_now()).collect();
    assert_eq!(guessed, [16, 48, 112]);
    // Once plain decoding is the slower (a batch that grew), guessing goes on, rechecked soon.
    payoff.record(false, 0.2, 1);
    payoff.record(false, 0.2, 1);
    let guessed: Vec<bool> = (0..16).map(|_| payoff.guess_now()).collect();
    assert_eq!(guessed.iter().filter(|&&guess| !guess).count(), 1);
    assert!(!guessed[15]);
}

/// Softmax of `logits`.
fn probabilities(logits: &[f32]) -> Vec<f64> {
    let exps: Vec<f64> = logits.iter().map(|&logit| f64::from(logit).exp()).collect();
    let total: f64 = exps.iter().sum();
    exps.iter().map(|exp| exp / total).collect()
}

/// Pearson's statistic of `counts` against `expected` probabilities.
fn chi_square(counts: &[u64], expected: &[f64]) -> f64 {
    let draws: u64 = counts.iter().sum();
    let draws = draws as f64;
    counts
        .iter()
        .zip(expected)
        .map(|(&count, &p)| (count as f64 - draws * p).powi(2) / (draws * p))
        .sum()
}

#[test]
fn checked_guesses_keep_the_models_distribution_and_a_wrong_rule_would_not() {
    use crate::sampling::{Sampler, SamplingParams};
    // A five-token vocabulary; the draft's certain guesses are token 1 (the model's second
    // choice) after the last token, then token 4.
    let first = [2.0, 1.0, 0.5, 0.0, -1.0];
    let second = [0.0, -0.5, 1.5, 0.3, 0.8];
    let guesses = [1, 4];
    const DRAWS: u64 = 20_000;
    // Pearson's statistic at four degrees of freedom is above this once in 10^4 draws of it.
    const CRITICAL: f64 = 23.51;
    let sampler = |seed| {
        Sampler::new(SamplingParams {
            temperature: 1.0,
            seed: Some(seed),
            ..SamplingParams::default()
        })
        .unwrap()
    };
    let (mut firsts, mut seconds) = ([0u64; 5], [0u64; 5]);
    let mut confirmed_total = 0;
    for seed in 0..DRAWS {
        let mut sampler = sampler(seed);
        let mut drawn = Vec::new();
        let confirmed = confirmed_guesses([&first, &second], &guesses, |row| {
            let token = sampler.sample(row, &drawn).unwrap();
            drawn.push(token);
            Drawn {
                token: Some(token),
                goes_on: true,
            }
        });
        confirmed_total += confirmed;
        // The check draws from the second row only after the first guess stood.
        assert_eq!(drawn.len(), 1 + usize::from(drawn[0] == guesses[0]));
        firsts[drawn[0] as usize] += 1;
        if let Some(&token) = drawn.get(1) {
            seconds[token as usize] += 1;
        }
    }
    let (p_first, p_second) = (probabilities(&first), probabilities(&second));
    let statistic = chi_square(&firsts, &p_first);
    assert!(statistic < CRITICAL, "first tokens {firsts:?}: {statistic}");
    let statistic = chi_square(&seconds, &p_second);
    assert!(
        statistic < CRITICAL,
        "second tokens {seconds:?}: {statistic}"
    );
    // A guess stands as often as the model draws it.
    let rate = firsts[1] as f64 / DRAWS as f64;
    assert!((rate - p_first[1]).abs() < 0.01, "{rate}");
    assert!(confirmed_total as u64 >= firsts[1]);

    // A rule that keeps a guess with the model's probability of it and otherwise draws afresh
    // from the whole distribution (not from what is left without the guess) drifts towards
    // the guess; these draws tell.
    let mut wrong = [0u64; 5];
    for seed in 0..DRAWS {
        let mut sampler = sampler(seed);
        let token = sampler.sample(&first, &[]).unwrap();
        let kept = token == guesses[0] || sampler.sample(&first, &[]).unwrap() == guesses[0];
        let token = if kept {
            guesses[0]
        } else {
            sampler.sample(&first, &[]).unwrap()
        };
        wrong[token as usize] += 1;
    }
    let statistic = chi_square(&wrong, &p_first);
    assert!(statistic > CRITICAL, "{wrong:?}: {statistic}");
}

#[test]
fn by_default_a_gpu_guesses_with_the_models_mtp_layer_else_by_prompt_lookup_and_a_cpu_not_at_all() {
    assert_eq!(default_method(true, true), Method::Mtp);
    assert_eq!(default_method(true, false), Method::Ngram);
    assert_eq!(default_method(false, true), Method::Off);
    assert_eq!(default_method(false, false), Method::Off);
}

#[test]
fn methods_parse_by_name() {
    assert_eq!(Method::parse("ngram"), Some(Method::Ngram));
    assert_eq!(Method::parse("off"), Some(Method::Off));
    assert_eq!(Method::parse("draft"), Some(Method::Draft));
    assert_eq!(Method::parse("mtp"), Some(Method::Mtp));
    assert_eq!(Method::parse("eagle"), None);
}

mod decoding {
    //! Guessing ahead changes no token: greedy, seeded and grammar-bound answers of the
    //! toolchain's transformers-made checkpoints, alone and eight in a batch, with prompt lookup
    //! on and off.

    use std::cell::RefCell;
    use std::path::PathBuf;
    use std::sync::Arc;

    use crate::batch::{Batch, BatchLimits, Job};
    use corral_ipc::OutputFormat;

    use crate::generation::{Event, GenerateError, GenerateRequest, Prompt, Timings};
    use crate::loaded::LoadedModel;
    use crate::model::KvCache;
    use crate::prefix_cache::{PrefixCache, PrefixCacheOptions, PrefixCounters};
    use crate::speculation::{Method, Speculation};

    /// `path` under tests/data.
    fn data(path: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../tests/data/{path}"))
    }

    fn checkpoint(arch: &str) -> PathBuf {
        data(&format!("toolchain/{arch}/hf"))
    }

    /// Prompts that repeat themselves, as an agent's re-read file does, and one that does not.
    const PROMPTS: [&str; 4] = [
        "the cat sat on the mat. the cat sat on the mat. the cat sat on",
        "fn main() { let x = 1; } fn main() { let x = 1; } fn main() {",
        "abcabcabcabcabcabc",
        "Hello there, how are you today?",
    ];

    fn request(prompt: &str, seed: Option<u64>) -> GenerateRequest {
        let mut request = GenerateRequest::greedy(Prompt::Text(prompt.to_owned()), 120);
        request.logprobs = Some(0);
        if let Some(seed) = seed {
            request.sampling.temperature = 0.9;
            request.sampling.seed = Some(seed);
        }
        request
    }

    const DRAFT_TOKENS: usize = 4;

    /// Each request's tokens and timings, all in one batch.
    fn run(
        loaded: &LoadedModel,
        requests: &[GenerateRequest],
        method: Method,
    ) -> Vec<(Vec<u32>, Timings)> {
        run_with(loaded, requests, method, None, None)
    }

    fn run_with(
        loaded: &LoadedModel,
        requests: &[GenerateRequest],
        method: Method,
        draft: Option<&LoadedModel>,
        prefix: Option<&mut PrefixCache>,
    ) -> Vec<(Vec<u32>, Timings)> {
        let limits = BatchLimits {
            speculation: Speculation {
                method,
                draft_tokens: DRAFT_TOKENS,
            },
            ..BatchLimits::default()
        };
        let results = RefCell::new(vec![(Vec::new(), None); requests.len()]);
        // Counts of guesses must not depend on the machine's speed.
        let mut batch = Batch::new(loaded, limits, None, prefix).guessing_every_pass();
        if let Some(draft) = draft {
            batch = batch.with_draft(draft);
        }
        for (index, request) in requests.iter().enumerate() {
            let results = &results;
            batch.submit(Job {
                request: request.clone(),
                cancelled: Box::new(|| false),
                sink: Box::new(move |event| match event.unwrap() {
                    Event::Delta { logprobs, .. } => results.borrow_mut()[index]
                        .0
                        .extend(logprobs.iter().map(|logprob| logprob.token)),
                    Event::Done { timings, .. } => results.borrow_mut()[index].1 = Some(timings),
                    Event::Accepted { .. } => {}
                }),
            });
        }
        while !batch.is_idle() {
            batch.step();
        }
        drop(batch);
        results
            .into_inner()
            .into_iter()
            .map(|(tokens, timings)| (tokens, timings.unwrap()))
            .collect()
    }

    /// Greedy and seeded, and two bound by a JSON grammar, whose guesses it may forbid.
    fn requests() -> Vec<GenerateRequest> {
        let mut requests: Vec<GenerateRequest> = PROMPTS
            .iter()
            .flat_map(|prompt| [request(prompt, None), request(prompt, Some(7))])
            .collect();
        for request in &mut requests[4..6] {
            request.output.format = Some(OutputFormat::JsonObject);
        }
        requests
    }

    #[test]
    fn guesses_change_no_token_alone_or_in_a_batch_of_eight() {
        // Attention, experts and latent attention, which forget a wrong guess's positions, and
        // the recurrent layers, which go back to the state they kept before it: gated DeltaNet,
        // short convolutions, Mamba-2.
        for arch in [
            "llama",
            "qwen3_moe",
            "deepseek_v3",
            "qwen3_5",
            "lfm2",
            "nemotron_h",
        ] {
            let loaded = LoadedModel::load(&checkpoint(arch)).unwrap();
            let requests = requests();
            let plain = each_alone(&loaded, &requests);
            // The model drafts for itself: its greedy guesses are all right for a greedy
            // answer and often wrong for a sampled one.
            for method in [Method::Ngram, Method::Draft] {
                let draft = (method == Method::Draft).then_some(&loaded);
                let guessed = run_with(&loaded, &requests, method, draft, None);
                let (drafted, accepted) =
                    same_tokens(&guessed, &plain, &format!("{arch} {method:?}"));
                // The repeating prompts give prompt lookup something to go on, and some of it
                // lands; a recurrent model's layers also went back over guesses refused.
                let recurrent = !loaded
                    .model
                    .new_cache()
                    .iter()
                    .all(KvCache::restores_from_blocks);
                assert!(
                    drafted > 0 && accepted > 0 && (!recurrent || accepted < drafted),
                    "{arch} {method:?}: {accepted} of {drafted}"
                );
                if method == Method::Draft {
                    // A model's greedy guesses for its own greedy answers are all taken, but for
                    // those past its end, which they are only while its draft cache holds what
                    // the answer holds.
                    for (request, (_, timings)) in requests.iter().zip(&guessed) {
                        if request.sampling.temperature == 0.0 {
                            let refused = timings.drafted - timings.accepted;
                            assert!(refused < DRAFT_TOKENS, "{arch}: {timings:?}");
                        }
                    }
                }
                // Alone too.
                let (tokens, _) = run_with(&loaded, &requests[..1], method, draft, None).remove(0);
                assert_eq!(tokens, plain[0], "{arch} {method:?}");
            }
        }
    }

    /// Each request's tokens, decoded plainly and alone.
    fn each_alone(loaded: &LoadedModel, requests: &[GenerateRequest]) -> Vec<Vec<u32>> {
        let alone = requests
            .iter()
            .map(|request| run(loaded, std::slice::from_ref(request), Method::Off));
        alone.map(|mut results| results.remove(0).0).collect()
    }

    /// Asserts each answer's tokens are plain decoding's; returns the guesses drafted and
    /// accepted in all.
    fn same_tokens(
        guessed: &[(Vec<u32>, Timings)],
        plain: &[Vec<u32>],
        what: &str,
    ) -> (usize, usize) {
        let (mut drafted, mut accepted) = (0, 0);
        for ((tokens, timings), plain) in guessed.iter().zip(plain) {
            assert_eq!(tokens, plain, "{what}");
            assert!(timings.accepted <= timings.drafted);
            drafted += timings.drafted;
            accepted += timings.accepted;
        }
        (drafted, accepted)
    }

    /// The toolchain's checkpoint of `arch` with its multi-token-prediction layer.
    fn mtp_checkpoint(arch: &str) -> PathBuf {
        data(&format!("mtp/{arch}"))
    }

    /// DeepSeek V3's next-n layer (latent attention, experts), GLM-4.5's (attention, experts)
    /// and Qwen3.5's (beside a hybrid model's recurrent layers, which go back over refused
    /// guesses).
    const MTP_ARCHS: [&str; 3] = ["deepseek_v3", "glm4_moe", "qwen3_5"];

    #[test]
    fn the_models_own_mtp_layer_guesses_without_changing_a_token() {
        // As the release ships it, and as llama.cpp's converter writes GLM-4.5's and Qwen3.5's
        // (`nextn` tensors past the trunk), each beside the same checkpoint without it.
        let layouts = MTP_ARCHS
            .map(|arch| (mtp_checkpoint(arch), checkpoint(arch)))
            .into_iter()
            .chain(["glm4_moe", "qwen3_5"].map(|arch| {
                let gguf = data(&format!("mtp/{arch}-gguf/model.gguf"));
                (gguf, data(&format!("toolchain/{arch}/gguf-f32/model.gguf")))
            }));
        for (with_layer, without) in layouts {
            let arch = with_layer.display();
            let loaded = LoadedModel::load(&with_layer).unwrap();
            let requests = requests();
            let plain = each_alone(&loaded, &requests);
            let guessed = run(&loaded, &requests, Method::Mtp);
            let (drafted, _) = same_tokens(&guessed, &plain, &format!("{arch} mtp"));
            assert!(drafted > 0, "{arch}");
            let (tokens, _) = run(&loaded, &requests[..1], Method::Mtp).remove(0);
            assert_eq!(tokens, plain[0], "{arch}");
            // Where the checkpoint dropped the layer, nothing is guessed, and a request that
            // asks for the layer is refused.
            let dropped = LoadedModel::load(&without).unwrap();
            let (_, timings) = run(&dropped, &requests[..1], Method::Mtp).remove(0);
            assert_eq!(timings.drafted, 0, "{arch}");
            let mut asks = requests[0].clone();
            asks.speculative = Some(Method::Mtp);
            let why = refusal(&dropped, asks.clone());
            assert!(why.contains("multi-token-prediction"), "{why}");
            // As is one that asks for a draft model where the worker has none.
            asks.speculative = Some(Method::Draft);
            let why = refusal(&loaded, asks);
            assert!(why.contains("no draft model"), "{why}");
        }
    }

    /// Why a batch without a draft model refuses `request`.
    fn refusal(loaded: &LoadedModel, request: GenerateRequest) -> String {
        let refusal = RefCell::new(None);
        let mut batch = Batch::new(loaded, BatchLimits::default(), None, None);
        batch.submit(Job {
            request,
            cancelled: Box::new(|| false),
            sink: Box::new(|event| match event {
                Err(GenerateError::Rejected(reason)) => {
                    *refusal.borrow_mut() = Some(reason.to_string());
                }
                other => panic!("not refused: {other:?}"),
            }),
        });
        assert!(batch.is_idle());
        drop(batch);
        refusal.into_inner().unwrap()
    }

    #[test]
    fn eight_sequences_each_guessing_its_own_way_share_each_pass_and_change_no_token() {
        let methods = [Method::Off, Method::Ngram, Method::Draft, Method::Mtp];
        for arch in MTP_ARCHS {
            let loaded = LoadedModel::load(&mtp_checkpoint(arch)).unwrap();
            let mut requests = requests();
            let plain = each_alone(&loaded, &requests);
            // Greedy and seeded, free and grammar-bound requests, each method twice; the model
            // drafts for itself.
            for (request, method) in requests.iter_mut().zip(methods.iter().cycle()) {
                request.speculative = Some(*method);
            }
            let guessed = run_with(&loaded, &requests, Method::Off, Some(&loaded), None);
            same_tokens(&guessed, &plain, &format!("{arch} mixed"));
            for method in methods {
                let drafted: usize = requests
                    .iter()
                    .zip(&guessed)
                    .filter(|(request, _)| request.speculative == Some(method))
                    .map(|(_, (_, timings))| timings.drafted)
                    .sum();
                assert_eq!(drafted == 0, method == Method::Off, "{arch} {method:?}");
            }
        }
    }

    #[test]
    fn a_draft_of_another_kind_changes_no_token_and_goes_back_over_its_own_guesses() {
        // A hybrid draft for an attention model, and the other way round: the draft's
        // recurrent layers go back over the guesses the model refused.
        for (arch, draft_arch) in [("llama", "qwen3_5"), ("qwen3_5", "llama")] {
            let loaded = LoadedModel::load(&checkpoint(arch)).unwrap();
            let draft = LoadedModel::load(&checkpoint(draft_arch)).unwrap();
            assert_eq!(
                crate::speculation::draft::incompatibility(&loaded, &draft),
                None
            );
            let requests = requests();
            let plain: Vec<Vec<u32>> = run(&loaded, &requests, Method::Off)
                .into_iter()
                .map(|(tokens, _)| tokens)
                .collect();
            let guessed = run_with(&loaded, &requests, Method::Draft, Some(&draft), None);
            let (drafted, _) = same_tokens(&guessed, &plain, &format!("{arch} by {draft_arch}"));
            assert!(drafted > 0);
        }
        // A draft of another tokenizer is refused, with the token that differs.
        let loaded = LoadedModel::load(&checkpoint("llama")).unwrap();
        let other = LoadedModel::load(&checkpoint("glm4")).unwrap();
        let reason = crate::speculation::draft::incompatibility(&loaded, &other).unwrap();
        assert!(reason.starts_with("token "), "{reason}");
    }

    #[test]
    fn a_recurrent_model_keeps_no_guessed_state_in_the_prefix_cache() {
        let loaded = LoadedModel::load(&checkpoint("qwen3_5")).unwrap();
        let options = PrefixCacheOptions {
            block_tokens: 4,
            ram_bytes: 64 << 20,
            disk_root: None,
            disk_bytes: 0,
            snapshot_every: 1,
        };
        let mut prefix =
            PrefixCache::open(&loaded, &options, Arc::new(PrefixCounters::default())).unwrap();
        let requests: Vec<GenerateRequest> =
            PROMPTS.iter().map(|prompt| request(prompt, None)).collect();
        let answers = run_with(&loaded, &requests, Method::Ngram, None, Some(&mut prefix));
        assert!(answers.iter().any(|(_, timings)| timings.accepted > 0));
        // Each answer's next turn starts from the states its decoding left at block
        // boundaries, some of them between guesses not all of which were taken; it reads as
        // the same turn read from scratch.
        let turns: Vec<GenerateRequest> = requests
            .iter()
            .zip(&answers)
            .map(|(request, (answer, _))| {
                let Prompt::Text(text) = &request.prompt else {
                    unreachable!()
                };
                let encode = |text: &str, special| {
                    let encoding = loaded.tokenizer.encode(text, special).unwrap();
                    encoding.get_ids().to_vec()
                };
                let mut tokens = encode(text, true);
                tokens.extend(answer);
                tokens.extend(encode(" and so", false));
                GenerateRequest::greedy(Prompt::Tokens(tokens), 8)
            })
            .collect();
        let restored = run_with(&loaded, &turns, Method::Off, None, Some(&mut prefix));
        let fresh = run(&loaded, &turns, Method::Off);
        for ((restored, timings), (fresh, _)) in restored.iter().zip(&fresh) {
            assert!(timings.cached_tokens > 0);
            assert_eq!(restored, fresh);
        }
    }
}
