use super::*;

const LAYERS: usize = 2;

fn tail(parent: u8, tokens: &[u32]) -> Tail {
    let dims = [1, 1, tokens.len() as i32, 4];
    let layers = (0..LAYERS)
        .map(|_| {
            (
                mlx_rs::ops::zeros::<f32>(&dims).unwrap(),
                mlx_rs::ops::ones::<f32>(&dims).unwrap(),
            )
        })
        .collect();
    Tail::new([parent; 32], tokens.to_vec(), layers, Ends::Anywhere)
}

/// A recurrent model's tail, with a state of `STATE_BYTES` after each of its first `at` tokens.
fn recurrent_tail(parent: u8, tokens: &[u32], at: &[usize]) -> Tail {
    let state = || -> Rc<[RecurrentState]> {
        Rc::from(vec![RecurrentState {
            conv: Some(mlx_rs::ops::zeros::<f32>(&[STATE_BYTES as i32 / 4]).unwrap()),
            delta: None,
        }])
    };
    let ends = Ends::At(at.iter().map(|&at| (at, state())).collect());
    Tail {
        ends,
        ..tail(parent, tokens)
    }
    .counted()
}

const STATE_BYTES: u64 = 1024;

impl Tail {
    fn counted(mut self) -> Self {
        self.count_bytes();
        self
    }
}

/// Bytes of a tail of `tokens` tokens: keys and values, 4 f32 each per layer.
fn bytes(tokens: u64) -> u64 {
    tokens * 4 * 4 * 2 * LAYERS as u64
}

#[test]
fn a_continuation_matches_to_the_token_and_only_under_its_parent() {
    let mut store = TailStore::new(1 << 20);
    store.insert(tail(1, &[10, 11, 12, 13, 14]));
    let (found, reused) = store.find(&[1; 32], &[10, 11, 12, 13, 14, 15, 16]).unwrap();
    assert_eq!(reused, 5);
    assert_eq!(found.first(reused)[0].0.dim(2), 5);
    assert!(store.find(&[2; 32], &[10, 11, 12, 13, 14, 15]).is_none());
}

#[test]
fn a_rerendered_history_reuses_up_to_the_first_differing_token() {
    let mut store = TailStore::new(1 << 20);
    store.insert(tail(1, &[10, 11, 12, 13, 14]));
    store.insert(tail(1, &[10, 11, 20]));
    // The template wrote 99 where the model had generated 13: three tokens match the first
    // tail, two the second; the longer match wins.
    let (found, reused) = store.find(&[1; 32], &[10, 11, 12, 99, 14, 15]).unwrap();
    assert_eq!(reused, 3);
    assert_eq!(found.tokens, [10, 11, 12, 13, 14]);
    assert!(store.find(&[1; 32], &[42, 10, 11]).is_none());
}

#[test]
fn at_least_one_token_is_left_to_prefill() {
    let mut store = TailStore::new(1 << 20);
    store.insert(tail(1, &[10, 11, 12]));
    assert_eq!(store.find(&[1; 32], &[10, 11, 12]).unwrap().1, 2);
    assert_eq!(store.find(&[1; 32], &[10, 11]).unwrap().1, 1);
    assert!(store.find(&[1; 32], &[10]).is_none());
    assert!(store.find(&[1; 32], &[]).is_none());
}

#[test]
fn a_longer_turn_replaces_the_tail_it_extends() {
    let mut store = TailStore::new(1 << 20);
    store.insert(tail(1, &[10, 11]));
    store.insert(tail(1, &[10, 11, 12, 13]));
    assert_eq!(store.bytes(), bytes(4));
    // A shorter run already covered by a kept tail adds nothing.
    store.insert(tail(1, &[10, 11, 12]));
    assert_eq!(store.bytes(), bytes(4));
    // Another conversation under the same parent is kept beside it.
    store.insert(tail(1, &[30, 31]));
    assert_eq!(store.bytes(), bytes(6));
}

#[test]
fn the_least_recently_used_tails_go_first_when_over_the_bound() {
    let mut store = TailStore::new(bytes(8));
    store.insert(tail(1, &[1, 2, 3]));
    store.insert(tail(2, &[4, 5, 6]));
    // Using the first makes the second the oldest.
    assert!(store.find(&[1; 32], &[1, 2, 3, 4]).is_some());
    assert_eq!(store.insert(tail(3, &[7, 8, 9])), 1);
    assert!(store.bytes() <= bytes(8));
    assert!(store.find(&[2; 32], &[4, 5, 6, 7]).is_none());
    assert!(store.find(&[1; 32], &[1, 2, 3, 4]).is_some());
    assert!(store.find(&[3; 32], &[7, 8, 9, 10]).is_some());
    // One larger than the whole bound is not kept, and evicts nothing.
    assert_eq!(store.insert(tail(4, &[0; 9])), 0);
    assert!(store.find(&[4; 32], &[0; 10]).is_none());
}

#[test]
fn a_recurrent_tail_is_reused_only_to_a_point_where_it_holds_the_state() {
    let mut store = TailStore::new(1 << 20);
    // The prompt's rest ended after 3 tokens; the sequence, after 6.
    store.insert(recurrent_tail(1, &[10, 11, 12], &[3]));
    store.insert(recurrent_tail(1, &[10, 11, 12, 13, 14, 15], &[6]));
    assert_eq!(store.bytes(), bytes(6) + 2 * STATE_BYTES);
    let (found, reused) = store.find(&[1; 32], &[10, 11, 12, 13, 14, 15, 16]).unwrap();
    assert_eq!(reused, 6);
    assert!(found.states_at(6).is_some());
    // The answer was re-rendered from its fourth token: back to the prompt's end.
    let (found, reused) = store.find(&[1; 32], &[10, 11, 12, 99, 14, 15, 16]).unwrap();
    assert_eq!(reused, 3);
    assert!(found.states_at(3).is_some());
    assert!(store.find(&[1; 32], &[10, 11, 99]).is_none());
    // A covered tail gives its state to the one covering it.
    store.insert(recurrent_tail(1, &[10, 11], &[2]));
    assert_eq!(store.find(&[1; 32], &[10, 11, 99]).unwrap().1, 2);
    assert_eq!(store.bytes(), bytes(6) + 3 * STATE_BYTES);
}

#[test]
fn a_recurrent_tail_over_the_bound_lets_go_of_its_latest_states_first() {
    let mut store = TailStore::new(bytes(6) + 2 * STATE_BYTES);
    store.insert(recurrent_tail(1, &[10, 11], &[2]));
    store.insert(recurrent_tail(1, &[10, 11, 12, 13], &[4]));
    store.insert(recurrent_tail(1, &[10, 11, 12, 13, 14, 15], &[6]));
    assert_eq!(store.bytes(), bytes(6) + 2 * STATE_BYTES);
    assert_eq!(
        store
            .find(&[1; 32], &[10, 11, 12, 13, 14, 15, 16])
            .unwrap()
            .1,
        4
    );
}
