//! Counting the model state a rank holds, in elements, as [`Zero`](super::Zero)
//! allocates and frees it: the memory ZeRO is about, free of the allocator's
//! and libtorch's own overheads that a process's RSS also shows.

/// The model state held, in elements.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Memory {
    /// Parameters: whole units, shards, and ZeRO-3's gathered units.
    pub params: i64,
    /// Gradients: whole units' and reduced shards.
    pub grads: i64,
    /// Optimizer state (SGD's momentum).
    pub state: i64,
}

impl Memory {
    /// All three.
    pub fn total(&self) -> i64 {
        self.params + self.grads + self.state
    }
}

/// What is held now, and the most held at once.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ledger {
    now: Memory,
    peak: Memory,
}

impl Ledger {
    fn moved(&mut self) {
        if self.now.total() > self.peak.total() {
            self.peak = self.now;
        }
    }

    /// Parameters allocated (positive) or freed (negative).
    pub fn params(&mut self, delta: i64) {
        self.now.params += delta;
        self.moved();
    }

    /// Gradients allocated (positive) or freed (negative).
    pub fn grads(&mut self, delta: i64) {
        self.now.grads += delta;
        self.moved();
    }

    /// Optimizer state allocated (positive) or freed (negative).
    pub fn state(&mut self, delta: i64) {
        self.now.state += delta;
        self.moved();
    }

    /// What is held now.
    pub fn now(&self) -> Memory {
        self.now
    }

    /// The moment the most was held (its parts as they were then).
    pub fn peak(&self) -> Memory {
        self.peak
    }
}
