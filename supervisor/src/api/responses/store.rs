//! The bounded in-memory store behind `previous_response_id` and `GET`/`DELETE
//! /v1/responses/{id}`: each stored response with the conversation it ended, so a later request
//! can continue it.
//!
//! Bounded by count, oldest first out: a local server has no database to grow into, and a
//! client that continues a conversation does so with a recent response. Nothing survives a
//! restart; an evicted id answers 404 like one never seen.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::object::{ResponseObject, assistant_messages};

/// What a stored response holds: the object `GET` returns, and the conversation as chat
/// messages (the inputs of every turn and the answers, without instructions, which OpenAI does
/// not carry over to the next turn). Each message is shared with the responses before and after
/// it in its conversation, so a long one (its images as data URLs) is held once, not once per
/// turn.
#[derive(Debug, Clone)]
pub struct Stored {
    pub response: ResponseObject,
    pub conversation: Vec<Arc<Value>>,
}

#[derive(Debug)]
pub struct ResponseStore {
    capacity: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    by_id: HashMap<String, Stored>,
    /// Ids in insertion order, oldest first.
    order: VecDeque<String>,
}

impl ResponseStore {
    /// A store that keeps at most `capacity` responses (0 keeps none).
    pub fn new(capacity: usize) -> Self {
        ResponseStore {
            capacity,
            inner: Mutex::new(Inner::default()),
        }
    }

    pub fn insert(&self, stored: Stored) {
        if self.capacity == 0 {
            return;
        }
        let mut inner = self.lock();
        let id = stored.response.id.clone();
        if inner.by_id.insert(id.clone(), stored).is_none() {
            inner.order.push_back(id);
        }
        while inner.order.len() > self.capacity {
            if let Some(oldest) = inner.order.pop_front() {
                inner.by_id.remove(&oldest);
            }
        }
    }

    pub fn get(&self, id: &str) -> Option<Stored> {
        self.lock().by_id.get(id).cloned()
    }

    /// Whether the id was stored.
    pub fn remove(&self, id: &str) -> bool {
        let mut inner = self.lock();
        let removed = inner.by_id.remove(id).is_some();
        if removed {
            inner.order.retain(|stored| stored != id);
        }
        removed
    }

    /// A poisoned lock only means another request panicked mid-update of two plain maps; the
    /// data is still usable, so the store keeps serving rather than failing every request.
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A response's way into the store once it has ended: the conversation it continues, to which
/// its answer is appended. Responses asked not to be stored (`store: false`) are dropped here.
pub struct Recorder {
    pub store: Arc<ResponseStore>,
    pub conversation: Vec<Arc<Value>>,
}

impl Recorder {
    pub fn record(self, response: &ResponseObject) {
        if !response.echo.store {
            return;
        }
        let mut conversation = self.conversation;
        conversation.extend(
            assistant_messages(&response.output)
                .into_iter()
                .map(Arc::new),
        );
        self.store.insert(Stored {
            response: response.clone(),
            conversation,
        });
    }
}
