use super::*;

/// `count` positions whose keys are their own position numbers.
fn numbered(first: i32, count: i32) -> Array {
    let data: Vec<f32> = (first..first + count)
        .map(|position| position as f32)
        .collect();
    Array::from_slice(&data, &[1, 1, count, 1])
}

fn column(array: &Array) -> Vec<f32> {
    array.as_slice::<f32>().to_vec()
}

#[test]
fn a_window_keeps_what_the_next_query_sees_and_what_the_prefix_cache_may_cut() {
    let mut cache = KvCache::rotating(4);
    cache
        .update_and_fetch(&numbered(0, 10), &numbered(0, 10))
        .unwrap();
    for position in 10..40 {
        let (keys, _) = cache
            .update_and_fetch(&numbered(position, 1), &numbered(position, 1))
            .unwrap();
        let keys = column(&keys);
        // The query at `position` sees the three before it and itself.
        assert_eq!(
            &keys[keys.len() - 4..],
            &[
                (position - 3) as f32,
                (position - 2) as f32,
                (position - 1) as f32,
                position as f32
            ]
        );
        assert!(cache.held_len() < 4 + 4, "{} held", cache.held_len());
    }
    assert_eq!(cache.offset(), 40);
    // A block that ended at 8 cannot be cut any more: a query at 8 would see 5..8.
    assert!(cache.positions(0, 8).is_none());
    let (last, _) = cache.positions(37, 40).unwrap();
    assert_eq!(column(&last), vec![37.0, 38.0, 39.0]);

    let mut kept = KvCache::rotating(4);
    kept.keep_from(16);
    kept.update_and_fetch(&numbered(0, 20), &numbered(0, 20))
        .unwrap();
    for position in 20..40 {
        kept.update_and_fetch(&numbered(position, 1), &numbered(position, 1))
            .unwrap();
    }
    let (tail, _) = kept.positions(16, 40).unwrap();
    assert_eq!(
        column(&tail),
        (16..40).map(|p| p as f32).collect::<Vec<_>>()
    );
    assert_eq!(kept.held_len(), 24);
}

#[test]
fn a_recurrent_cache_finds_the_boundaries_a_chunk_crosses_and_keeps_their_states() {
    let mut cache = KvCache::recurrent();
    assert!(cache.states_to_record(10).is_empty());
    cache.snapshot_every(4);
    assert_eq!(cache.states_to_record(10), [4, 8]);
    let state = |first| RecurrentState {
        conv: Some(numbered(first, 3)),
        delta: None,
    };
    cache.record_state(4, state(0));
    cache.record_state(8, state(1));
    cache.advance_recurrent(state(2), 10).unwrap();
    // From position 10, the next boundaries are 12 (after 2) and 16 (after 6).
    assert_eq!(cache.states_to_record(6), [2, 6]);
    assert_eq!(cache.states_to_record(1), Vec::<i32>::new());
    assert_eq!(cache.snapshot_positions(), [4, 8]);
    let at_eight = cache.snapshot_at(8).unwrap();
    assert_eq!(column(at_eight.conv.as_ref().unwrap()), [1.0, 2.0, 3.0]);
    assert_eq!(at_eight.bytes(), 12);
    cache.retain_snapshots(|position| position > 4);
    assert_eq!(cache.snapshot_positions(), [8]);

    let mut restored = KvCache::recurrent();
    restored.restore_recurrent(state(5), 8).unwrap();
    assert_eq!(restored.offset(), 8);
    assert!(KvCache::default().restore_recurrent(state(0), 8).is_err());
    // A key/value cache records nothing.
    let mut keys = KvCache::default();
    keys.snapshot_every(4);
    assert!(keys.states_to_record(10).is_empty());
}

#[test]
fn a_cache_forgets_guessed_positions_a_recurrent_one_by_the_state_it_kept_at_each() {
    let mut keys = KvCache::default();
    keys.update_and_fetch(&numbered(0, 6), &numbered(0, 6))
        .unwrap();
    keys.hold_each_state();
    keys.forget_last(2).unwrap();
    assert_eq!(keys.offset(), 4);
    let (held, _) = keys.held().unwrap();
    assert_eq!(column(&held), [0.0, 1.0, 2.0, 3.0]);

    let state = |first| RecurrentState {
        conv: Some(numbered(first, 3)),
        delta: None,
    };
    let mut cache = KvCache::recurrent();
    cache.snapshot_every(4);
    cache.advance_recurrent(state(0), 2).unwrap();
    // An input of five positions (2..7), the last four guesses: a state after each, of which
    // the one after position 4 is also a block boundary's.
    cache.hold_each_state();
    assert_eq!(cache.states_to_record(5), [1, 2, 3, 4, 5]);
    for within in 1..=5 {
        cache.record_state(within, state(10 * within));
    }
    cache.advance_recurrent(state(50), 5).unwrap();
    assert_eq!(cache.snapshot_positions(), [4]);
    // Two guesses confirmed, two not: back to the state after position 5.
    cache.forget_last(2).unwrap();
    assert_eq!(cache.offset(), 5);
    let conv = |cache: &KvCache| column(cache.recurrent_state().unwrap().conv.as_ref().unwrap());
    assert_eq!(conv(&cache), [30.0, 31.0, 32.0]);
    // Without guesses it records only boundaries again.
    assert_eq!(cache.states_to_record(5), [3]);

    // A guessed boundary's snapshot goes with the guess.
    cache.hold_each_state();
    for within in 1..=3 {
        cache.record_state(within, state(100 * within));
    }
    cache.advance_recurrent(state(300), 3).unwrap();
    assert_eq!(cache.snapshot_positions(), [4, 8]);
    cache.forget_last(2).unwrap();
    assert_eq!(
        (cache.offset(), conv(&cache)),
        (6, vec![100.0, 101.0, 102.0])
    );
    assert_eq!(cache.snapshot_positions(), [4]);
    // Guesses fed one input at a time, as a draft model's are: back to the state held before
    // the first of them.
    cache.hold_each_state();
    for guess in 0..2 {
        assert_eq!(cache.states_to_record(1), [1]);
        cache.record_state(1, state(200 + guess));
        cache.advance_recurrent(state(200 + guess), 1).unwrap();
    }
    cache.forget_last(2).unwrap();
    assert_eq!(
        (cache.offset(), conv(&cache)),
        (6, vec![100.0, 101.0, 102.0])
    );
    // Every guess confirmed: nothing to forget, and the states held go.
    cache.hold_each_state();
    cache.record_state(1, state(7));
    cache.advance_recurrent(state(7), 1).unwrap();
    cache.forget_last(0).unwrap();
    assert_eq!(cache.offset(), 7);
    // Forgetting what it kept no state before is an error, not a wrong state.
    assert!(cache.forget_last(1).is_err());
}

#[test]
fn a_recurrent_cache_holds_no_positions_and_refuses_a_restore() {
    let mut cache = KvCache::recurrent();
    assert!(!cache.restores_from_blocks());
    let state = RecurrentState {
        conv: Some(numbered(0, 3)),
        delta: Some(numbered(0, 4)),
    };
    cache.advance_recurrent(state, 5).unwrap();
    assert_eq!(cache.offset(), 5);
    assert!(cache.positions(0, 4).is_none());
    assert!(cache.restore(numbered(0, 4), numbered(0, 4)).is_err());
    assert!(KvCache::default().restores_from_blocks());
    let mut keys = KvCache::default();
    assert!(
        keys.advance_recurrent(RecurrentState::default(), 1)
            .is_err()
    );
}
