//! Every message variant survives a frame round trip, and the encoding stays compatible when
//! optional fields are added.

use std::collections::BTreeSet;

use corral_ipc::*;
use serde::Serialize;

use crate::samples;

fn round_trip<T>(msg: &T) -> T
where
    T: Serialize + serde::de::DeserializeOwned,
{
    let frame = encode_frame(msg).expect("sample encodes");
    let (back, used) = decode_frame::<T>(&frame)
        .expect("sample decodes")
        .expect("frame is complete");
    assert_eq!(used, frame.len(), "decode consumes exactly one frame");
    back
}

#[test]
fn every_to_worker_variant_round_trips() {
    let samples = samples::to_worker();
    for msg in &samples {
        assert_eq!(&round_trip(msg), msg);
    }
    let names: BTreeSet<_> = samples.iter().map(ToWorker::name).collect();
    assert_eq!(names.len(), 8, "samples cover every variant: {names:?}");
}

#[test]
fn every_from_worker_variant_round_trips() {
    let samples = samples::from_worker();
    for msg in &samples {
        assert_eq!(&round_trip(msg), msg);
    }
    let names: BTreeSet<_> = samples.iter().map(FromWorker::name).collect();
    assert_eq!(names.len(), 11, "samples cover every variant: {names:?}");
}

#[test]
fn chat_json_keeps_key_order_and_number_types() {
    let msg = ToWorker::Generate {
        id: 1,
        request: Box::new(samples::generate_request(samples::chat_prompt())),
    };
    let ToWorker::Generate { request, .. } = round_trip(&msg) else {
        panic!("variant changed in transit");
    };
    let Prompt::Chat { messages, .. } = request.prompt else {
        panic!("prompt kind changed in transit");
    };
    let keys: Vec<_> = messages[2].as_object().expect("object").keys().collect();
    assert_eq!(
        keys,
        [
            "zeta", "alpha", "mid", "big", "neg", "flag", "none", "nested"
        ]
    );
    assert!(messages[2]["big"].is_u64() && messages[2]["neg"].is_i64());
    assert!(messages[2]["mid"].is_f64());
}

#[test]
fn fields_travel_by_name() {
    let frame = encode_frame(&samples::from_worker()[3]).expect("encodes");
    let body = &frame[HEADER_BYTES..];
    assert!(body.windows(13).any(|w| w == b"prompt_tokens"));
}

#[test]
fn image_bytes_travel_as_msgpack_bin_not_an_array_of_integers() {
    let image = PromptImage {
        bytes: vec![0xff; 300],
        location: "messages[0].content[0]".into(),
    };
    let frame = encode_frame(&image).expect("encodes");
    let body = &frame[HEADER_BYTES..];
    // bin 16: marker 0xc5, a big-endian length of 300, then the bytes themselves.
    let bin = [&[0xc5, 0x01, 0x2c][..], &[0xff; 300]].concat();
    assert!(body.windows(bin.len()).any(|w| w == bin), "{body:x?}");
    assert!(body.len() < 300 + 64, "{} bytes", body.len());
}

#[test]
fn a_chat_from_a_supervisor_without_images_decodes_with_none() {
    #[derive(Serialize)]
    enum OlderPrompt {
        Chat {
            messages: Vec<serde_json::Value>,
            tools: Option<Vec<serde_json::Value>>,
        },
    }
    let old = OlderPrompt::Chat {
        messages: vec![serde_json::json!({"role": "user", "content": "hi"})],
        tools: None,
    };
    let frame = encode_frame(&old).expect("encodes");
    let (prompt, _) = decode_frame::<Prompt>(&frame)
        .expect("decodes")
        .expect("complete");
    let Prompt::Chat { images, .. } = prompt else {
        panic!("prompt kind changed in transit");
    };
    assert!(images.is_empty());
}

#[test]
fn a_peer_without_a_new_optional_field_still_decodes() {
    #[derive(Serialize)]
    enum OlderFromWorker {
        Delta {
            id: u64,
            text: String,
            token_count: u32,
        },
    }
    let old = OlderFromWorker::Delta {
        id: 5,
        text: "hi".into(),
        token_count: 1,
    };
    let frame = encode_frame(&old).expect("encodes");
    let (msg, _) = decode_frame::<FromWorker>(&frame)
        .expect("decodes")
        .expect("complete");
    let expected = FromWorker::Delta {
        id: 5,
        text: "hi".into(),
        reasoning: String::new(),
        tool_calls: Vec::new(),
        token_count: 1,
        logprobs: None,
    };
    assert_eq!(msg, expected);
}

#[test]
fn a_load_failure_from_a_worker_that_does_not_classify_it_counts_as_transient() {
    #[derive(Serialize)]
    enum OlderFromWorker {
        LoadFailed { message: String },
    }
    let old = OlderFromWorker::LoadFailed {
        message: "out of memory".into(),
    };
    let frame = encode_frame(&old).expect("encodes");
    let (msg, _) = decode_frame::<FromWorker>(&frame)
        .expect("decodes")
        .expect("complete");
    let expected = FromWorker::LoadFailed {
        message: "out of memory".into(),
        permanent: false,
    };
    assert_eq!(msg, expected);
}

#[test]
fn a_peer_with_an_unknown_field_still_decodes() {
    #[derive(Serialize)]
    enum NewerToWorker {
        Cancel { id: u64, reason: Option<String> },
    }
    let newer = NewerToWorker::Cancel {
        id: 8,
        reason: Some("client went away".into()),
    };
    let frame = encode_frame(&newer).expect("encodes");
    let (msg, _) = decode_frame::<ToWorker>(&frame)
        .expect("decodes")
        .expect("complete");
    assert_eq!(msg, ToWorker::Cancel { id: 8 });
}

#[test]
fn an_unknown_variant_is_a_decode_error() {
    #[derive(Serialize)]
    enum FutureToWorker {
        Reload { path: String },
    }
    let frame = encode_frame(&FutureToWorker::Reload { path: "/m".into() }).expect("encodes");
    let err = decode_frame::<ToWorker>(&frame).expect_err("unknown variant");
    assert!(matches!(err, CodecError::Decode { .. }), "{err}");
    assert!(err.to_string().contains("Reload"), "{err}");
}
