//! Length buckets shared by every request waiting on an embedding worker.
//!
//! Each request's inputs are tokenized on arrival and wait here as items. A batch takes the
//! bucket (lengths up to the same power of two) of the oldest request's next item, and fills it
//! with that bucket's items from every waiting request, oldest request first, shortest first,
//! while the padded batch stays under a token cap. Requests that arrive while a batch runs join
//! the pool before the next batch is formed, so concurrent requests share batches; a request
//! ends when its last item has come back.

use std::collections::VecDeque;

/// Padded tokens (rows × longest row) one batch may hold.
pub const DEFAULT_MAX_BATCH_TOKENS: usize = 16384;

/// One input's tokens (a text, or a query-document pair).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub ids: Vec<u32>,
    pub type_ids: Vec<u32>,
}

/// A request waiting for its items' outputs; `T` is what it needs to answer.
struct Waiting<T> {
    request: T,
    items: Vec<Item>,
    outputs: Vec<Option<Vec<f32>>>,
    /// Items not yet taken into a batch.
    pending: Vec<usize>,
    missing: usize,
}

/// Which item of which request a batch row holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    request: u64,
    item: usize,
}

pub struct Batcher<T> {
    /// By arrival; the key orders requests and names them in rows.
    waiting: VecDeque<(u64, Waiting<T>)>,
    next_key: u64,
    max_batch_tokens: usize,
}

fn bucket(length: usize) -> usize {
    length.max(1).next_power_of_two()
}

impl<T> Batcher<T> {
    pub fn new(max_batch_tokens: usize) -> Self {
        Self {
            waiting: VecDeque::new(),
            next_key: 0,
            max_batch_tokens: max_batch_tokens.max(1),
        }
    }

    /// Adds a request with at least one item.
    pub fn push(&mut self, request: T, items: Vec<Item>) {
        let mut pending: Vec<usize> = (0..items.len()).collect();
        pending.sort_by_key(|&index| items[index].ids.len());
        let waiting = Waiting {
            request,
            outputs: vec![None; items.len()],
            missing: items.len(),
            pending,
            items,
        };
        self.waiting.push_back((self.next_key, waiting));
        self.next_key += 1;
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Requests that have had items computed, and those not started.
    pub fn counts(&self) -> (usize, usize) {
        let started = self
            .waiting
            .iter()
            .filter(|(_, waiting)| waiting.pending.len() < waiting.items.len())
            .count();
        (started, self.waiting.len() - started)
    }

    /// Drops the requests `gone` says are gone (cancelled), returning them.
    pub fn remove_where(&mut self, mut gone: impl FnMut(&T) -> bool) -> Vec<T> {
        let (removed, kept) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition::<VecDeque<_>, _>(|(_, waiting)| gone(&waiting.request));
        self.waiting = kept;
        removed
            .into_iter()
            .map(|(_, waiting)| waiting.request)
            .collect()
    }

    /// The next batch's rows, shortest first, with their items; empty when nothing waits.
    pub fn next_batch(&mut self) -> Vec<(Row, &Item)> {
        let Some(first) = self
            .waiting
            .iter()
            .find_map(|(_, waiting)| waiting.pending.first().map(|&i| &waiting.items[i]))
        else {
            return Vec::new();
        };
        let chosen = bucket(first.ids.len());
        let mut rows: Vec<Row> = Vec::new();
        let mut longest = 0;
        'fill: for (key, waiting) in &mut self.waiting {
            let mut taken = Vec::new();
            for (position, &item) in waiting.pending.iter().enumerate() {
                let length = waiting.items[item].ids.len();
                if bucket(length) != chosen {
                    continue;
                }
                let width = longest.max(length);
                if !rows.is_empty() && (rows.len() + 1) * width > self.max_batch_tokens {
                    remove_positions(&mut waiting.pending, &taken);
                    break 'fill;
                }
                longest = width;
                taken.push(position);
                rows.push(Row {
                    request: *key,
                    item,
                });
            }
            remove_positions(&mut waiting.pending, &taken);
        }
        rows.sort_by_key(|row| self.item(*row).map_or(0, |item| item.ids.len()));
        rows.into_iter()
            .filter_map(|row| self.item(row).map(|item| (row, item)))
            .collect()
    }

    fn item(&self, row: Row) -> Option<&Item> {
        self.waiting
            .iter()
            .find(|(key, _)| *key == row.request)
            .and_then(|(_, waiting)| waiting.items.get(row.item))
    }

    /// Stores a batch's outputs (one per row, in the rows' order) and returns the requests that
    /// are now complete, with their outputs in item order.
    pub fn complete(&mut self, rows: &[Row], outputs: Vec<Vec<f32>>) -> Vec<(T, Vec<Vec<f32>>)> {
        for (row, output) in rows.iter().zip(outputs) {
            if let Some((_, waiting)) = self.waiting.iter_mut().find(|(key, _)| *key == row.request)
                && let Some(slot) = waiting.outputs.get_mut(row.item)
                && slot.is_none()
            {
                *slot = Some(output);
                waiting.missing -= 1;
            }
        }
        let (done, kept) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition::<VecDeque<_>, _>(|(_, waiting)| waiting.missing == 0);
        self.waiting = kept;
        done.into_iter()
            .map(|(_, waiting)| {
                let outputs = waiting.outputs.into_iter().flatten().collect();
                (waiting.request, outputs)
            })
            .collect()
    }

    /// Fails the requests that had rows in a batch whose computation failed.
    pub fn fail(&mut self, rows: &[Row]) -> Vec<T> {
        self.remove_where_key(|key| rows.iter().any(|row| row.request == key))
    }

    fn remove_where_key(&mut self, mut gone: impl FnMut(u64) -> bool) -> Vec<T> {
        let (removed, kept) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition::<VecDeque<_>, _>(|(key, _)| gone(*key));
        self.waiting = kept;
        removed
            .into_iter()
            .map(|(_, waiting)| waiting.request)
            .collect()
    }
}

fn remove_positions(pending: &mut Vec<usize>, positions: &[usize]) {
    for &position in positions.iter().rev() {
        pending.remove(position);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(lengths: &[usize]) -> Vec<Item> {
        lengths
            .iter()
            .map(|&length| Item {
                ids: vec![7; length],
                type_ids: vec![0; length],
            })
            .collect()
    }

    fn lengths(batch: &[(Row, &Item)]) -> Vec<usize> {
        batch.iter().map(|(_, item)| item.ids.len()).collect()
    }

    #[test]
    fn a_batch_holds_one_length_bucket_shortest_first() {
        let mut batcher = Batcher::new(1000);
        batcher.push("a", items(&[30, 3, 4, 100]));
        assert_eq!(lengths(&batcher.next_batch()), vec![3, 4]);
        assert_eq!(lengths(&batcher.next_batch()), vec![30]);
        assert_eq!(lengths(&batcher.next_batch()), vec![100]);
        assert!(batcher.next_batch().is_empty());
    }

    #[test]
    fn concurrent_requests_share_a_batch_and_complete_in_item_order() {
        let mut batcher = Batcher::new(1000);
        batcher.push("first", items(&[5, 6]));
        batcher.push("second", items(&[7]));
        let rows: Vec<Row> = batcher
            .next_batch()
            .into_iter()
            .map(|(row, _)| row)
            .collect();
        assert_eq!(rows.len(), 3);
        let outputs = rows
            .iter()
            .map(|row| vec![row.request as f32, row.item as f32])
            .collect();
        let done = batcher.complete(&rows, outputs);
        assert_eq!(done.len(), 2);
        assert_eq!(done[0], ("first", vec![vec![0.0, 0.0], vec![0.0, 1.0]]));
        assert_eq!(done[1], ("second", vec![vec![1.0, 0.0]]));
        assert!(batcher.is_empty());
    }

    #[test]
    fn the_token_cap_splits_a_bucket_and_counts_started_requests() {
        let mut batcher = Batcher::new(20);
        batcher.push("a", items(&[8, 8, 8]));
        batcher.push("b", items(&[8]));
        let first: Vec<Row> = batcher
            .next_batch()
            .into_iter()
            .map(|(row, _)| row)
            .collect();
        assert_eq!(first.len(), 2);
        assert_eq!(batcher.counts(), (1, 1));
        assert!(batcher.complete(&first, vec![vec![1.0]; 2]).is_empty());
        let second: Vec<Row> = batcher
            .next_batch()
            .into_iter()
            .map(|(row, _)| row)
            .collect();
        let done = batcher.complete(&second, vec![vec![2.0]; 2]);
        assert_eq!(
            done.iter().map(|(name, _)| *name).collect::<Vec<_>>(),
            vec!["a", "b"]
        );
    }

    #[test]
    fn removed_requests_leave_the_pool() {
        let mut batcher = Batcher::new(100);
        batcher.push("keep", items(&[2]));
        batcher.push("drop", items(&[2]));
        assert_eq!(batcher.remove_where(|name| *name == "drop"), vec!["drop"]);
        assert_eq!(batcher.next_batch().len(), 1);
    }
}
