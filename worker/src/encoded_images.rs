//! The vision tower's rows of the images encoded lately, by the digest of their pixels: an
//! image sent again (an agent re-sends the whole conversation every turn) skips the tower.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use mlx_rs::Array;
use mlx_rs::error::Exception;

use crate::image::Patches;
use crate::model::VisionTower;

/// Bounded by count, the least recently used out; each entry is one image's rows.
#[derive(Default)]
pub struct EncodedImages {
    rows: RefCell<HashMap<[u8; 32], (u64, Array)>>,
    uses: Cell<u64>,
}

/// Images whose rows are kept: an agent's conversation re-sends a handful of screenshots.
const ENCODED_IMAGES_KEPT: usize = 32;

impl EncodedImages {
    /// The rows of the image `patches` hold, from `tower` unless kept.
    pub(crate) fn rows(&self, tower: &VisionTower, patches: &Patches) -> Result<Array, Exception> {
        let use_number = self.uses.get() + 1;
        self.uses.set(use_number);
        if let Some((used, rows)) = self.rows.borrow_mut().get_mut(&patches.digest) {
            *used = use_number;
            return Ok(rows.clone());
        }
        let rows = tower.encode(&patch_array(patches), grid_of(patches))?;
        rows.eval()?;
        self.keep(patches, rows.clone());
        Ok(rows)
    }

    /// Whether the rows of the image `patches` hold are kept.
    pub(crate) fn holds(&self, patches: &Patches) -> bool {
        self.rows.borrow().contains_key(&patches.digest)
    }

    /// Keeps `rows`, the tower's for the image `patches` hold, in place of the least recently
    /// used when full.
    pub(crate) fn keep(&self, patches: &Patches, rows: Array) {
        let use_number = self.uses.get() + 1;
        self.uses.set(use_number);
        let mut kept = self.rows.borrow_mut();
        if kept.len() >= ENCODED_IMAGES_KEPT
            && let Some(oldest) = kept
                .iter()
                .min_by_key(|(_, (used, _))| *used)
                .map(|(digest, _)| *digest)
        {
            kept.remove(&oldest);
        }
        kept.insert(patches.digest, (use_number, rows));
    }
}

/// An image's patches as the tower takes them, `[patches, values per patch]`.
pub(crate) fn patch_array(patches: &Patches) -> Array {
    let count = patches.values.len() / patches.patch_values;
    Array::from_slice(
        &patches.values,
        &[count as i32, patches.patch_values as i32],
    )
}

/// An image's grid of patches as the tower takes it.
pub(crate) fn grid_of(patches: &Patches) -> [i32; 3] {
    patches.grid.map(|side| side as i32)
}
