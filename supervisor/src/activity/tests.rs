use std::sync::Arc;

use corral_ipc::Usage;

use super::*;

fn usage(prompt: u32, cached: u32, completion: u32) -> Usage {
    Usage {
        prompt_tokens: prompt,
        cached_tokens: cached,
        completion_tokens: completion,
        ..Usage::default()
    }
}

#[tokio::test]
async fn a_generation_is_one_record_from_its_start_to_its_end() {
    let activity = Arc::new(Activity::new());
    let mut subscription = activity.subscribe();
    assert!(subscription.recent.is_empty());
    let record = activity
        .begin("/v1/chat/completions", Some("opencode/1.0"))
        .unwrap();
    record
        .clone()
        .scope(async {
            let current = RequestRecord::current().unwrap();
            current.generating("llama");
            current.first_token();
            current.generated(&usage(120, 100, 8), 400);
        })
        .await;
    assert!(RequestRecord::current().is_none());
    record.finished(200, "ignored: the generation named it");

    let started = subscription.next().await.unwrap();
    assert_eq!(started.phase, EventPhase::Started);
    assert_eq!((started.api, started.model.as_str()), ("chat", "llama"));
    let finished = subscription.next().await.unwrap();
    assert_eq!(finished.id, started.id);
    assert_eq!(finished.phase, EventPhase::Finished);
    assert_eq!(finished.client, "opencode/1.0");
    assert_eq!(finished.model, "llama");
    assert_eq!(finished.status, Some(200));
    assert_eq!(
        (
            finished.prompt_tokens,
            finished.cached_tokens,
            finished.output_tokens
        ),
        (Some(120), Some(100), Some(8))
    );
    assert_eq!(finished.tokens_per_second, Some(20.0));
    assert!(finished.ttft_ms.is_some() && finished.duration_ms.is_some());

    let recent = activity.subscribe().recent;
    assert_eq!(recent.len(), 1);
    assert_eq!(recent[0].phase, EventPhase::Finished);
}

#[tokio::test]
async fn closing_ends_every_subscription() {
    let activity = Arc::new(Activity::new());
    let mut subscription = activity.subscribe();
    activity.close();
    assert!(subscription.next().await.is_none());
    assert!(activity.subscribe().next().await.is_none());
}

#[test]
fn only_the_api_routes_are_tracked() {
    let activity = Arc::new(Activity::new());
    assert!(activity.begin("/v1/messages", None).is_some());
    assert!(activity.begin("/rerank", None).is_some());
    for route in [
        "/admin/workers",
        "/v1/models",
        "/",
        "/ui/app.js",
        "unmatched",
    ] {
        assert!(activity.begin(route, None).is_none(), "{route}");
    }
}

#[test]
fn each_sample_folds_the_requests_since_the_last_and_an_hour_is_kept() {
    let activity = Arc::new(Activity::new());
    for (ttft, tokens) in [(30.0, 10), (10.0, 20), (20.0, 0)] {
        let record = activity.begin("/v1/completions", None).unwrap();
        record.event.lock().unwrap().ttft_ms = Some(ttft);
        record.generated(&usage(5, 0, tokens), 100);
        record.finished(200, "llama");
    }
    activity.sample(1 << 20);
    let first = activity.history().samples[0].clone();
    assert_eq!(first.requests, 3);
    assert_eq!(first.ttft_ms, Some(20.0));
    assert_eq!(first.used_bytes, 1 << 20);
    assert!(first.tokens_per_second > 0.0);
    activity.sample(0);
    let second = activity.history().samples[1].clone();
    assert_eq!((second.requests, second.ttft_ms), (0, None));
    assert_eq!(second.tokens_per_second, 0.0);
    for _ in 0..400 {
        activity.sample(0);
    }
    let history = activity.history();
    assert_eq!(history.samples.len(), 360);
    assert_eq!(history.interval_secs, 10);
}
