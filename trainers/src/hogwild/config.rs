//! What a Hogwild run trains and how ([`HogwildConfig`]), and its one-line
//! encoding for the workers' environment.

use super::*;

/// How the workers get the shared memory (PyTorch's `torch.multiprocessing` sharing
/// strategies).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Sharing {
    /// An anonymous memory file whose descriptor is sent over a Unix socket.
    FileDescriptor,
    /// A named file in `/dev/shm`, opened by name.
    FileSystem,
}

impl Sharing {
    pub(super) fn name(self) -> &'static str {
        match self {
            Sharing::FileDescriptor => "file_descriptor",
            Sharing::FileSystem => "file_system",
        }
    }
}

/// Fault injection for tests: worker `rank` sends itself SIGKILL after `after_steps`
/// optimizer steps (0: before it attaches to the shared memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KillWorker {
    /// The worker to kill.
    pub rank: usize,
    /// Steps it does first.
    pub after_steps: usize,
}

/// What to train and how.
#[derive(Debug, Clone, PartialEq)]
pub struct HogwildConfig {
    /// Worker processes, `1..=MAX_WORKERS`.
    pub workers: usize,
    /// SGD steps each worker takes.
    pub steps: usize,
    /// Examples per step.
    pub batch: usize,
    /// SGD learning rate.
    pub lr: f64,
    /// The model: [`Arch::Mlp`] (with [`hidden`](Self::hidden)) or [`Arch::Cnn`].
    /// Not [`Arch::Resnet`]: its batch-norm statistics are buffers, which the region
    /// does not share.
    pub model: Arch,
    /// Hidden layer widths of the MLP (784 → … → 10).
    pub hidden: Vec<i64>,
    /// An MNIST-format folder ([`data::DEFAULT_DIR`]: Fashion-MNIST): worker `r`
    /// trains on examples `r, r + workers, …` of the first [`samples`](Self::samples)
    /// training examples, the parent evaluates on the test split. `None`: the
    /// synthetic set ([`data::synthetic`]) of `samples` examples, evaluated on itself.
    pub data: Option<PathBuf>,
    /// Training examples used (with `data`, at most the split's size).
    pub samples: usize,
    /// Seed of the synthetic data set.
    pub data_seed: u64,
    /// How the workers get the shared memory.
    pub sharing: Sharing,
    /// How long the whole run may take before the parent kills the workers.
    pub timeout: Duration,
    /// Fault injection (tests).
    pub kill_worker: Option<KillWorker>,
    /// How often the parent reads the workers' loss sums for [`HogwildReport::curve`].
    pub sample_every: Duration,
    /// SGD steps a worker takes on a private copy before it adds their delta into
    /// the shared parameters ([`push_delta`](super::push_delta): local SGD, Downpour
    /// style). 1: every step writes straight into the shared parameters (Hogwild!).
    pub local_steps: usize,
}

impl Default for HogwildConfig {
    /// 2 workers × 100 steps of 16 on 1,024 synthetic examples, MLP 784-32-10.
    fn default() -> Self {
        HogwildConfig {
            workers: 2,
            steps: 100,
            batch: 16,
            lr: 0.05,
            model: Arch::Mlp,
            hidden: vec![32],
            data: None,
            samples: 1024,
            data_seed: 1,
            sharing: Sharing::FileDescriptor,
            timeout: Duration::from_secs(120),
            kill_worker: None,
            sample_every: Duration::from_millis(250),
            local_steps: 1,
        }
    }
}

impl HogwildConfig {
    /// Checks the numbers are usable.
    pub fn validate(&self) -> Result<()> {
        let bad = |what: String| Err(Error::InvalidArgument(what));
        if self.workers == 0 || self.workers > MAX_WORKERS {
            return bad(format!(
                "workers must be 1..={MAX_WORKERS}, got {}",
                self.workers
            ));
        }
        if self.steps == 0 || self.batch == 0 || self.local_steps == 0 {
            return bad("steps, batch and local steps must be at least 1".into());
        }
        if self.samples < self.workers {
            return bad(format!(
                "{} samples cannot give each of {} workers one",
                self.samples, self.workers
            ));
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return bad(format!(
                "the learning rate must be positive, got {}",
                self.lr
            ));
        }
        if self.hidden.iter().any(|&h| h <= 0) {
            return bad(format!("hidden widths must be positive: {:?}", self.hidden));
        }
        if self.model == Arch::Resnet {
            return bad(
                "Hogwild shares trainable parameters only; the ResNet's batch-norm \
                 statistics would stay private to each worker (use mlp or cnn)"
                    .into(),
            );
        }
        if let Some(dir) = &self.data {
            // The path travels in the `;`-separated environment encoding.
            if dir.to_str().is_none_or(|d| d.contains(';') || d.is_empty()) {
                return bad(format!(
                    "the data folder {} must be non-empty UTF-8 without ';'",
                    dir.display()
                ));
            }
        }
        if self.sample_every.is_zero() {
            return bad("sample_every must be positive".into());
        }
        if let Some(k) = self.kill_worker {
            if k.rank >= self.workers {
                return bad(format!("cannot kill worker {} of {}", k.rank, self.workers));
            }
        }
        Ok(())
    }

    /// The model every process builds.
    pub fn blueprint(&self) -> models::Blueprint {
        match self.model {
            Arch::Mlp => models::mlp(&MlpConfig {
                hidden: self.hidden.clone(),
                ..Default::default()
            }),
            other => other.blueprint(),
        }
    }

    /// The training examples: the first `samples` of the data folder's training
    /// split, or the synthetic set.
    pub fn train_set(&self) -> Result<Dataset> {
        match &self.data {
            Some(dir) => data::load(dir, Split::Train)?.head(self.samples),
            None => data::synthetic(self.samples, self.data_seed),
        }
    }

    /// What the parent evaluates on: the data folder's test split, or the
    /// synthetic training set itself.
    pub fn eval_set(&self) -> Result<Dataset> {
        match &self.data {
            Some(dir) => data::load(dir, Split::Test),
            None => data::synthetic(self.samples, self.data_seed),
        }
    }

    /// One line for the environment: `key=value` pairs separated by `;`.
    pub fn encode(&self) -> String {
        let hidden: Vec<String> = self.hidden.iter().map(i64::to_string).collect();
        let model = match self.model {
            Arch::Mlp => "mlp",
            Arch::Cnn => "cnn",
            Arch::Resnet => "resnet",
        };
        let mut s = format!(
            "workers={};steps={};batch={};lr={};model={model};hidden={};samples={};data_seed={};sharing={};timeout_ms={};sample_ms={};local_steps={}",
            self.workers,
            self.steps,
            self.batch,
            self.lr,
            hidden.join(","),
            self.samples,
            self.data_seed,
            self.sharing.name(),
            self.timeout.as_millis(),
            self.sample_every.as_millis(),
            self.local_steps
        );
        if let Some(k) = self.kill_worker {
            s.push_str(&format!(";kill={}@{}", k.rank, k.after_steps));
        }
        if let Some(dir) = self.data.as_ref().and_then(|d| d.to_str()) {
            s.push_str(&format!(";data={dir}"));
        }
        s
    }

    /// The inverse of [`encode`](Self::encode).
    pub fn decode(s: &str) -> Result<HogwildConfig> {
        let bad = |what: &str| Error::InvalidArgument(format!("hogwild config {s:?}: {what}"));
        let num = |v: &str, key: &str| {
            v.parse::<u64>()
                .map_err(|_| bad(&format!("{key}={v} is not a number")))
        };
        let mut c = HogwildConfig::default();
        for pair in s.split(';').filter(|p| !p.is_empty()) {
            let (key, v) = pair
                .split_once('=')
                .ok_or_else(|| bad(&format!("{pair:?} is not key=value")))?;
            match key {
                "workers" => c.workers = num(v, key)? as usize,
                "steps" => c.steps = num(v, key)? as usize,
                "batch" => c.batch = num(v, key)? as usize,
                "samples" => c.samples = num(v, key)? as usize,
                "local_steps" => c.local_steps = num(v, key)? as usize,
                "data_seed" => c.data_seed = num(v, key)?,
                "timeout_ms" => c.timeout = Duration::from_millis(num(v, key)?),
                "sample_ms" => c.sample_every = Duration::from_millis(num(v, key)?),
                "data" => c.data = Some(PathBuf::from(v)),
                "model" => {
                    c.model = match v {
                        "mlp" => Arch::Mlp,
                        "cnn" => Arch::Cnn,
                        "resnet" => Arch::Resnet,
                        _ => return Err(bad(&format!("unknown model {v}"))),
                    }
                }
                "lr" => c.lr = v.parse().map_err(|_| bad(&format!("lr={v}")))?,
                "hidden" => {
                    c.hidden = v
                        .split(',')
                        .filter(|h| !h.is_empty())
                        .map(|h| h.parse().map_err(|_| bad(&format!("hidden={v}"))))
                        .collect::<Result<_>>()?
                }
                "sharing" => {
                    c.sharing = match v {
                        "file_descriptor" => Sharing::FileDescriptor,
                        "file_system" => Sharing::FileSystem,
                        _ => return Err(bad(&format!("unknown sharing {v}"))),
                    }
                }
                "kill" => {
                    let (r, n) = v.split_once('@').ok_or_else(|| bad("kill=RANK@STEPS"))?;
                    c.kill_worker = Some(KillWorker {
                        rank: num(r, key)? as usize,
                        after_steps: num(n, key)? as usize,
                    });
                }
                _ => return Err(bad(&format!("unknown key {key}"))),
            }
        }
        c.validate()?;
        Ok(c)
    }
}
