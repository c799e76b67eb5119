//! MLX's own distributed backend, through mlx-c (mlx-rs 0.33 has no wrapper for it): the group a
//! worker's ranks form, and the collectives they compute each step with. Activations and
//! reductions between ranks only ever travel through these; corral has no tensor protocol of its
//! own.

use std::ffi::CString;
use std::sync::Arc;

use corral_ipc::{GROUP_COORDINATOR_ENV, GROUP_DEVICES_ENV, GROUP_HOSTFILE_ENV, GROUP_RANK_ENV};
use mlx_rs::error::Exception;
use mlx_rs::{Array, Dtype, Stream};

/// How a rank ends when its group's collectives fail.
pub const EXIT_GROUP_LOST: i32 = 75;

/// Ends this rank, whose group has lost another (`error` says how it showed).
pub fn lost(error: &str) -> ! {
    tracing::error!(%error, "the worker group lost a rank; this rank ends");
    std::process::exit(EXIT_GROUP_LOST)
}

/// How the ranks of a group split a model between them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Parallel {
    /// Each rank runs a contiguous share of the layers.
    Pipeline,
    /// Each rank runs every layer on its slice of each split projection.
    Tensor,
}

/// Which of MLX's distributed backends a group's ranks join by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// TCP between neighbours: `MLX_RANK` and `MLX_HOSTFILE`.
    Ring,
    /// RDMA over Thunderbolt (macOS): `MLX_RANK`, `MLX_JACCL_COORDINATOR` and
    /// `MLX_IBV_DEVICES`.
    Jaccl,
}

impl Backend {
    /// MLX's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ring => "ring",
            Self::Jaccl => "jaccl",
        }
    }

    /// The environment it joins by.
    fn variables(self) -> Vec<&'static str> {
        match self {
            Self::Ring => vec![GROUP_RANK_ENV, GROUP_HOSTFILE_ENV],
            Self::Jaccl => vec![GROUP_RANK_ENV, GROUP_COORDINATOR_ENV, GROUP_DEVICES_ENV],
        }
    }
}

/// A rank of a group, and how the group splits its model.
#[derive(Clone, Debug)]
pub struct Member {
    pub group: Arc<Group>,
    pub parallel: Parallel,
}

/// This process's place in a group of ranks that compute one model together.
#[derive(Debug)]
pub struct Group {
    raw: mlx_sys::mlx_distributed_group,
    rank: usize,
    size: usize,
}

impl Group {
    /// Joins the group `backend` describes from the environment; returns when every rank has
    /// joined. Fails rather than fall back to a group of one.
    pub fn join(backend: Backend) -> Result<Self, Exception> {
        let variables = backend.variables().join(", ");
        let backend = backend.name();
        let name = CString::new(backend)
            .map_err(|_| Exception::custom(format!("backend name {backend:?} holds a NUL")))?;
        // SAFETY: `raw` starts as an empty group that mlx-c fills on success; the name outlives
        // the call.
        let raw = unsafe {
            if !mlx_sys::mlx_distributed_is_available(name.as_ptr()) {
                return Err(Exception::custom(format!(
                    "MLX was built without its {backend} distributed backend"
                )));
            }
            let mut raw = mlx_sys::mlx_distributed_group_new();
            if mlx_sys::mlx_distributed_init(&mut raw, true, name.as_ptr()) != 0 {
                return Err(Exception::custom(format!(
                    "joining the {backend} group failed (see {variables})"
                )));
            }
            raw
        };
        // SAFETY: `raw` is the live group mlx-c just initialized.
        let (rank, size) = unsafe {
            (
                mlx_sys::mlx_distributed_group_rank(raw),
                mlx_sys::mlx_distributed_group_size(raw),
            )
        };
        Ok(Self {
            raw,
            rank: usize::try_from(rank).unwrap_or_default(),
            size: usize::try_from(size).unwrap_or(1),
        })
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// The element-wise sum of `x` over every rank.
    pub fn all_sum(&self, x: &Array) -> Result<Array, Exception> {
        self.collective("all_sum", |res, stream| {
            // SAFETY: live handles for the call's duration (see `collective`).
            unsafe { mlx_sys::mlx_distributed_all_sum(res, x.as_ptr(), self.raw, stream) }
        })
    }

    /// Every rank's `x`, concatenated along the first axis in rank order.
    pub fn all_gather(&self, x: &Array) -> Result<Array, Exception> {
        self.collective("all_gather", |res, stream| {
            // SAFETY: as in `all_sum`.
            unsafe { mlx_sys::mlx_distributed_all_gather(res, x.as_ptr(), self.raw, stream) }
        })
    }

    /// Sends `x` to rank `to` when the result is evaluated; the result is `x` again, so that the
    /// send stays in the graph of what follows.
    pub fn send(&self, x: &Array, to: usize) -> Result<Array, Exception> {
        let to = to as i32;
        self.collective("send", |res, stream| {
            // SAFETY: as in `all_sum`.
            unsafe { mlx_sys::mlx_distributed_send(res, x.as_ptr(), to, self.raw, stream) }
        })
    }

    /// An array of `shape` and `dtype` that rank `from` sends.
    pub fn recv(&self, shape: &[i32], dtype: Dtype, from: usize) -> Result<Array, Exception> {
        let from = from as i32;
        self.collective("recv", |res, stream| {
            // SAFETY: as in `all_sum`; `shape` outlives the call.
            unsafe {
                mlx_sys::mlx_distributed_recv(
                    res,
                    shape.as_ptr(),
                    shape.len(),
                    dtype as mlx_sys::mlx_dtype,
                    from,
                    self.raw,
                    stream,
                )
            }
        })
    }

    /// Rank 0's `bytes`, on every rank (the others' are ignored): its length, then its bytes,
    /// each summed with the zeros every other rank gives.
    pub fn broadcast(&self, bytes: &[u8]) -> Result<Vec<u8>, Exception> {
        let length = match self.rank {
            0 => i32::try_from(bytes.len())
                .map_err(|_| Exception::custom("a broadcast of more than 2 GiB"))?,
            _ => 0,
        };
        let length = self.all_sum(&Array::from_int(length))?;
        length.eval()?;
        let length = length
            .try_item_exact::<i32>()
            .map_err(|error| Exception::custom(error.to_string()))?;
        if length <= 0 {
            return Ok(Vec::new());
        }
        let ours = match self.rank {
            0 => Array::from_slice(bytes, &[length]),
            _ => mlx_rs::ops::zeros::<u8>(&[length])?,
        };
        let summed = self.all_sum(&ours)?;
        summed.eval()?;
        Ok(summed.as_slice::<u8>().to_vec())
    }

    /// Rank 0's `yes`, on every rank. A group whose collectives fail has lost a rank, and this
    /// one ends rather than run on alone.
    pub fn rank_zeros(&self, yes: bool) -> bool {
        match self.broadcast(&[u8::from(yes)]) {
            Ok(agreed) => agreed.first() == Some(&1),
            Err(error) => lost(&error.to_string()),
        }
    }

    /// Whether every rank holds the same `value`. A group whose collectives fail has lost a
    /// rank, and this one ends rather than run on alone.
    pub fn all_agree(&self, value: u32) -> bool {
        let gathered = self
            .all_gather(&Array::from_slice(&[value], &[1]))
            .and_then(|gathered| gathered.eval().map(|()| gathered));
        match gathered {
            Ok(values) => values.as_slice::<u32>().iter().all(|each| *each == value),
            Err(error) => lost(&error.to_string()),
        }
    }

    /// Runs one mlx-c collective that writes its result into `res`.
    fn collective(
        &self,
        operation: &str,
        call: impl FnOnce(*mut mlx_sys::mlx_array, mlx_sys::mlx_stream) -> i32,
    ) -> Result<Array, Exception> {
        let stream = Stream::thread_local_or_default();
        // SAFETY: `res` starts as an empty array that mlx-c fills on success and that `Array`
        // then owns (and frees on either path).
        unsafe {
            let mut res = mlx_sys::mlx_array_new();
            let status = call(&mut res, stream.as_ptr());
            let array = Array::from_ptr(res);
            if status != 0 {
                return Err(Exception::custom(format!(
                    "MLX distributed {operation} failed on rank {} of {}",
                    self.rank, self.size
                )));
            }
            Ok(array)
        }
    }
}

// SAFETY: the handle is a shared pointer to MLX's backend, which it only reads; the collectives
// themselves run when an array is evaluated, on the one thread that evaluates the model.
unsafe impl Send for Group {}
unsafe impl Sync for Group {}

impl Drop for Group {
    fn drop(&mut self) {
        // SAFETY: the group was initialized by mlx-c and is freed once.
        unsafe {
            mlx_sys::mlx_distributed_group_free(self.raw);
        }
    }
}
