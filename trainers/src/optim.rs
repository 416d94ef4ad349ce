//! Stochastic gradient descent with momentum whose state can be saved, in a few
//! tensor operations per step however many parameters the model has.
//!
//! tch's `nn::Optimizer` wraps libtorch's C++ optimizer and does not expose its
//! momentum buffers, so a checkpoint made with it could not resume training exactly.
//! [`Sgd`] keeps the buffers itself and hands them out by parameter *name*, and
//! [`crate::checkpoint`] stores them next to the weights.
//!
//! The update is `torch.optim.SGD`'s, per parameter `p` with gradient `g`:
//!
//! ```text
//! g   = g + weight_decay · p                         (if weight_decay ≠ 0)
//! buf = g                                            (first step)
//! buf = momentum · buf + (1 − dampening) · g         (later steps)
//! g   = g + momentum · buf   if nesterov, else buf   (if momentum ≠ 0)
//! p   = p − lr · g
//! ```
//!
//! **Flat storage.** Element-wise, that update is the same for every parameter, so
//! [`Sgd`] runs it once over all of them: at construction the parameters of each
//! dtype and device are copied end to end into one flat tensor and each parameter
//! becomes a view of its slice (`set_data`, as PyTorch's `p.data = …`); likewise
//! each parameter's `.grad`, so autograd, which adds a new gradient *in place* into a
//! defined `.grad`, accumulates straight into the flat gradient; and the momentum
//! buffers are slices of one flat buffer. A step is then about eight tensor
//! operations per group (usually one group) instead of eight per parameter: on a GPU,
//! where each is a kernel launch, this is what keeps the optimizer off the step's
//! critical path (tch 0.24 has neither `_foreach_*` nor `_fused_sgd_`).
//! [`Sgd::step_ops`] counts them. Before each step [`Sgd`] checks (by data pointer,
//! no tensor operation) that every parameter and gradient still lives in its slice;
//! one that was moved (e.g. by a second optimizer over the same parameters, or a
//! `set_data`) is copied back in, with its current values.
//!
//! **Channels-last convolution weights on the CPU.** A 4-D parameter's slice on
//! the CPU is a channels-last view (`(O, I, H, W)` with the strides of
//! `(O, H, W, I)`), as PyTorch's `model.to(memory_format=torch.channels_last)`
//! lays it out: oneDNN then runs the convolutions, forward and backward, with
//! its NHWC kernels. On the 2-core Xeon VM, with one thread, PyTorch's own step
//! of the workshop's CNN took 18.8 ms with NCHW weights and 11.5 with
//! channels-last ones. The gradient is a view of the same strides, so autograd
//! still accumulates into it in place. Such a parameter is not `is_contiguous()`:
//! code that needs a contiguous tensor (a collective buffer, a checkpoint) copies
//! it with `contiguous()`, as [`crate::checkpoint`] does. On a GPU the layout
//! stays as the model built it (cuDNN's fp32 choice is not measured here).
//!
//! **Unused parameters.** Every parameter has a gradient from construction on, zero
//! until a backward reaches it, as PyTorch leaves them with `zero_grad(set_to_none=
//! False)`. A parameter the forward pass does not use is therefore updated with a
//! zero gradient (momentum and weight decay still move it), where PyTorch's default
//! `set_to_none=True` would skip it.
//!
//! **Rounding.** PyTorch computes each `x.add(y, alpha=a)` above as one fused
//! multiply-add (on AVX2/AVX-512 CPUs and on CUDA). tch 0.24's `add` has no
//! `alpha`, so [`Sgd`] calls libtorch's own `add_(other, alpha)` through the C++
//! shim ([`crate::autograd::add_scaled_`]): the same kernel, hence the same
//! rounding as PyTorch's on every device. (Until 2026-11 it emulated the fused
//! operation in `f64` on the CPU: five kernels instead of one for the update.)
//! A test compares the result with libtorch's own `torch::optim::SGD` (what tch's
//! `nn::Sgd` runs, the same formulas as Python's) for plain, momentum, weight-decay,
//! Nesterov and dampened SGD: equal to within 1e-6 after five steps, and it prints
//! how many elements are equal to the bit (the tolerance, not the bits, is what is
//! asserted, so the test holds whatever kernels a machine's libtorch picks).
//! What exact resumption from a checkpoint needs holds by construction: [`Sgd`] is
//! bit-for-bit deterministic with itself (same ops, same order, same shapes).

use tch::nn::VarStore;
use tch::{Device, Kind, Tensor};

use crate::autograd::define_grad;
use crate::{Error, Result};

/// Hyper-parameters of [`Sgd`], named as in `torch.optim.SGD`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SgdConfig {
    /// Learning rate.
    pub lr: f64,
    /// Momentum factor; 0 turns momentum (and its buffers) off.
    pub momentum: f64,
    /// Dampening of the gradient's contribution to the momentum buffer.
    pub dampening: f64,
    /// L2 penalty added to the gradient.
    pub weight_decay: f64,
    /// Nesterov momentum (needs `momentum > 0` and `dampening == 0`).
    pub nesterov: bool,
}

impl SgdConfig {
    /// Plain SGD with learning rate `lr` (PyTorch's defaults for everything else).
    pub fn new(lr: f64) -> SgdConfig {
        SgdConfig {
            lr,
            momentum: 0.0,
            dampening: 0.0,
            weight_decay: 0.0,
            nesterov: false,
        }
    }

    /// The same with momentum `m`.
    pub fn momentum(mut self, m: f64) -> SgdConfig {
        self.momentum = m;
        self
    }

    /// The same with weight decay `wd`.
    pub fn weight_decay(mut self, wd: f64) -> SgdConfig {
        self.weight_decay = wd;
        self
    }

    /// The same with Nesterov momentum on or off.
    pub fn nesterov(mut self, on: bool) -> SgdConfig {
        self.nesterov = on;
        self
    }

    /// The checks `torch.optim.SGD.__init__` makes.
    pub fn validate(&self) -> Result<()> {
        let bad = |what: String| Err(Error::InvalidArgument(format!("SGD: {what}")));
        if !(self.lr.is_finite() && self.lr >= 0.0) {
            return bad(format!(
                "learning rate {} is not a finite value >= 0",
                self.lr
            ));
        }
        if !(self.momentum.is_finite() && self.momentum >= 0.0) {
            return bad(format!(
                "momentum {} is not a finite value >= 0",
                self.momentum
            ));
        }
        if !(self.weight_decay.is_finite() && self.weight_decay >= 0.0) {
            return bad(format!(
                "weight decay {} is not a finite value >= 0",
                self.weight_decay
            ));
        }
        if !self.dampening.is_finite() {
            return bad(format!("dampening {} is not finite", self.dampening));
        }
        if self.nesterov && (self.momentum <= 0.0 || self.dampening != 0.0) {
            return bad("Nesterov momentum requires a momentum and zero dampening".into());
        }
        Ok(())
    }
}

/// SGD with momentum over named parameters; see the [module docs](self).
#[derive(Debug)]
pub struct Sgd {
    config: SgdConfig,
    /// (name, variable) in name order, so every rank and every run walks them alike.
    params: Vec<(String, Tensor)>,
    /// The parameters that require a gradient, by dtype and device, laid flat.
    groups: Vec<Group>,
    /// Tensor operations the last [`Sgd::step`] issued.
    step_ops: usize,
}

/// The parameters of one dtype on one device, end to end in flat tensors.
#[derive(Debug)]
struct Group {
    /// Indices into [`Sgd::params`], in name order.
    members: Vec<usize>,
    /// Each member's shape, and its offset and length in the flat tensors.
    spans: Vec<(Vec<i64>, i64, i64)>,
    /// The parameters' values; each member is a view of its slice.
    params: Tensor,
    /// Their gradients; each member's `.grad` is a view of its slice.
    grads: Tensor,
    /// The momentum buffers; `None` until the first step with momentum (or a load).
    momentum: Option<Tensor>,
    /// Members (positions in `members`) whose buffer does not exist although
    /// `momentum` does (a checkpoint held only some): their next step sets it to
    /// their gradient, as a first step does.
    fresh: Vec<usize>,
}

/// Counts the tensor operations a step dispatches (each a kernel on a GPU).
#[derive(Debug, Default)]
struct Ops(usize);

impl Ops {
    /// Counts one operation and converts its error.
    fn run<T>(&mut self, r: std::result::Result<T, tch::TchError>) -> Result<T> {
        self.0 += 1;
        Ok(r?)
    }

    /// Counts one in-place operation (whose returned handle is the tensor itself).
    fn apply(&mut self, r: std::result::Result<Tensor, tch::TchError>) -> Result<()> {
        self.run(r).map(drop)
    }
}

impl Group {
    /// The members `members` of `all` (same dtype and device) laid flat, each
    /// parameter and gradient made a view of its slice.
    fn new(members: Vec<usize>, all: &[(String, Tensor)]) -> Result<Group> {
        let first = &all[members[0]].1;
        let options = (first.f_kind()?, first.device());
        let mut spans = Vec::with_capacity(members.len());
        let mut total = 0;
        for &i in &members {
            let n = all[i].1.numel() as i64;
            spans.push((all[i].1.size(), total, n));
            total += n;
        }
        let group = Group {
            members,
            spans,
            params: Tensor::f_empty([total], options)?,
            grads: Tensor::f_zeros([total], options)?,
            momentum: None,
            fresh: Vec::new(),
        };
        group.attach(all, &mut Ops::default())?;
        Ok(group)
    }

    /// Member `k`'s slice of `flat`, shaped as the member. On the CPU a 4-D
    /// member (a convolution's weight) is laid out channels-last (see the module
    /// docs), elsewhere as the member is.
    fn slice(&self, flat: &Tensor, k: usize) -> Result<Tensor> {
        let (shape, offset, n) = &self.spans[k];
        let part = flat.f_narrow(0, *offset, *n)?;
        match shape.as_slice() {
            &[o, i, h, w] if flat.device() == Device::Cpu => {
                Ok(part.f_view([o, h, w, i])?.f_permute([0, 3, 1, 2])?)
            }
            _ => Ok(part.f_view(shape.as_slice())?),
        }
    }

    /// Whether every member and its gradient still live in their slices (pointers
    /// only: no tensor operation, so the check costs no kernel).
    fn attached(&self, all: &[(String, Tensor)]) -> bool {
        let elt = self.params.kind().elt_size_in_bytes();
        let (params, grads) = (
            self.params.data_ptr() as usize,
            self.grads.data_ptr() as usize,
        );
        self.members
            .iter()
            .zip(&self.spans)
            .all(|(&i, (_, at, n))| {
                let p = &all[i].1;
                let at = *at as usize * elt;
                // An empty member has no storage to share: nothing to check.
                *n == 0
                    || (p.data_ptr() as usize == params + at
                        && p.f_grad()
                            .is_ok_and(|g| g.defined() && g.data_ptr() as usize == grads + at))
            })
    }

    /// Copies every member's values and gradient (zero if it has none) into its
    /// slices and makes the member and its `.grad` views of them.
    fn attach(&self, all: &[(String, Tensor)], ops: &mut Ops) -> Result<()> {
        tch::no_grad(|| -> Result<()> {
            for (k, &i) in self.members.iter().enumerate() {
                let p = &all[i].1;
                let (value, grad) = (self.slice(&self.params, k)?, self.slice(&self.grads, k)?);
                ops.run(value.shallow_clone().f_copy_(p))?;
                let mut g = p.f_grad()?;
                if g.defined() {
                    ops.run(grad.shallow_clone().f_copy_(&g))?;
                } else {
                    g = define_grad(p)?;
                    ops.apply(grad.shallow_clone().f_zero_())?;
                }
                // `set_data` swaps the storage under the variable (and under its
                // `.grad`, which is what autograd accumulates into) and keeps its
                // identity: every handle to it, e.g. a VarStore's, sees the slice.
                p.shallow_clone().f_set_data(&value)?;
                g.f_set_data(&grad)?;
            }
            Ok(())
        })
    }

    /// One SGD update of all members (under `no_grad`).
    fn update(&mut self, c: SgdConfig, ops: &mut Ops) -> Result<()> {
        let Group {
            params,
            grads,
            momentum,
            fresh,
            spans,
            ..
        } = self;
        // The direction: the gradient itself, or a new tensor where the rule changes
        // it (the `.grad` the caller sees is never modified).
        let mut d = if c.weight_decay != 0.0 {
            let mut d = ops.run(grads.f_detach_copy())?;
            axpy(&mut d, c.weight_decay, params, ops)?;
            Some(d)
        } else {
            None
        };
        if c.momentum != 0.0 {
            let dir = d.as_ref().unwrap_or(grads);
            let buf = match momentum {
                Some(buf) => {
                    ops.apply(buf.f_mul_scalar_(c.momentum))?;
                    if c.dampening != 0.0 {
                        axpy(buf, 1.0 - c.dampening, dir, ops)?;
                    } else {
                        // alpha = 1: the fused and the plain sum are the same.
                        ops.apply(buf.f_add_(dir))?;
                    }
                    buf.shallow_clone()
                }
                None => {
                    let buf = ops.run(dir.f_detach_copy())?;
                    *momentum = Some(buf.shallow_clone());
                    buf
                }
            };
            // Only after a load with some buffers missing: one copy per such member,
            // once.
            let fresh = std::mem::take(fresh);
            for k in fresh {
                let (_, at, n) = spans[k];
                let mut slot = buf.f_narrow(0, at, n)?;
                ops.run(slot.f_copy_(&dir.f_narrow(0, at, n)?))?;
            }
            d = Some(if c.nesterov {
                let mut n = match d {
                    Some(d) => d,
                    None => ops.run(grads.f_detach_copy())?,
                };
                axpy(&mut n, c.momentum, &buf, ops)?;
                n
            } else {
                buf
            });
        }
        let dir = d.as_ref().unwrap_or(grads);
        axpy(&mut params.shallow_clone(), -c.lr, dir, ops)
    }
}

impl Sgd {
    /// An optimizer over the trainable variables of `vs` (those that require a
    /// gradient: batch-norm running statistics are not included).
    pub fn new(vs: &VarStore, config: SgdConfig) -> Result<Sgd> {
        let params = vs
            .variables()
            .into_iter()
            .filter(|(_, t)| t.requires_grad());
        Sgd::with_params(params, config)
    }

    /// An optimizer over the given named parameters (e.g. several stages' VarStores).
    /// Names must be unique, and a parameter that requires a gradient must be a leaf
    /// (a variable, not computed from one). From here on each parameter that requires
    /// a gradient, and its gradient, share the optimizer's flat storage (see the
    /// [module docs](self)); one that does not is never updated.
    pub fn with_params(
        params: impl IntoIterator<Item = (String, Tensor)>,
        config: SgdConfig,
    ) -> Result<Sgd> {
        config.validate()?;
        let mut params: Vec<(String, Tensor)> = params.into_iter().collect();
        params.sort_by(|a, b| a.0.cmp(&b.0));
        if let Some(w) = params.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(Error::InvalidArgument(format!(
                "SGD: parameter name {:?} given twice",
                w[0].0
            )));
        }
        let mut by_place: Vec<((Kind, Device), Vec<usize>)> = Vec::new();
        for (i, (name, p)) in params.iter().enumerate() {
            if !p.requires_grad() {
                continue;
            }
            if !p.f_is_leaf()? {
                return Err(Error::InvalidArgument(format!(
                    "SGD: parameter {name:?} is computed from other tensors (not a leaf)"
                )));
            }
            let place = (p.f_kind()?, p.device());
            match by_place.iter_mut().find(|(at, _)| *at == place) {
                Some((_, members)) => members.push(i),
                None => by_place.push((place, vec![i])),
            }
        }
        let groups = by_place
            .into_iter()
            .map(|(_, members)| Group::new(members, &params))
            .collect::<Result<_>>()?;
        Ok(Sgd {
            config,
            params,
            groups,
            step_ops: 0,
        })
    }

    /// The hyper-parameters.
    pub fn config(&self) -> SgdConfig {
        self.config
    }

    /// Replaces the hyper-parameters (a learning-rate schedule, or after loading a
    /// checkpoint); the momentum buffers are kept.
    pub fn set_config(&mut self, config: SgdConfig) -> Result<()> {
        config.validate()?;
        self.config = config;
        Ok(())
    }

    /// The learning rate.
    pub fn lr(&self) -> f64 {
        self.config.lr
    }

    /// Sets the learning rate.
    pub fn set_lr(&mut self, lr: f64) -> Result<()> {
        self.set_config(SgdConfig { lr, ..self.config })
    }

    /// The parameter names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.params.iter().map(|(n, _)| n.as_str())
    }

    /// The parameters, by name, sorted.
    pub fn params(&self) -> &[(String, Tensor)] {
        &self.params
    }

    /// The momentum buffers by parameter name, sorted (views of the optimizer's own
    /// flat buffer, sharing its storage). Empty before the first step or without
    /// momentum.
    pub fn momentum_buffers(&self) -> Vec<(String, Tensor)> {
        let mut out = Vec::new();
        for g in &self.groups {
            let Some(buf) = &g.momentum else { continue };
            for (k, &i) in g.members.iter().enumerate() {
                if g.fresh.contains(&k) {
                    continue;
                }
                // Narrowing our own flat tensor to a span we laid out cannot fail.
                if let Ok(view) = g.slice(buf, k) {
                    out.push((self.params[i].0.clone(), view));
                }
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Replaces all momentum buffers. Each name must be a parameter of this optimizer
    /// that requires a gradient, and each buffer must have its parameter's shape and
    /// kind; nothing changes unless all of them do. The buffers are copied onto the
    /// parameters' devices; a parameter given none starts its buffer at its next step.
    pub fn set_momentum_buffers(
        &mut self,
        buffers: impl IntoIterator<Item = (String, Tensor)>,
    ) -> Result<()> {
        // (group, member) of each given buffer, checked before anything changes.
        let mut given: Vec<(usize, usize, Tensor)> = Vec::new();
        for (name, buf) in buffers {
            let Ok(i) = self.params.binary_search_by(|(n, _)| n.as_str().cmp(&name)) else {
                return Err(Error::InvalidArgument(format!(
                    "SGD: momentum buffer for {name:?}, which is not a parameter"
                )));
            };
            let p = &self.params[i].1;
            if buf.size() != p.size() || buf.kind() != p.kind() {
                return Err(Error::InvalidArgument(format!(
                    "SGD: momentum buffer for {name:?} is {:?} {:?}, the parameter is {:?} {:?}",
                    buf.kind(),
                    buf.size(),
                    p.kind(),
                    p.size()
                )));
            }
            let Some((gi, k)) = self
                .groups
                .iter()
                .enumerate()
                .find_map(|(gi, g)| g.members.iter().position(|&m| m == i).map(|k| (gi, k)))
            else {
                return Err(Error::InvalidArgument(format!(
                    "SGD: momentum buffer for {name:?}, a parameter that requires no gradient"
                )));
            };
            given.push((gi, k, buf));
        }
        let mut new: Vec<(Option<Tensor>, Vec<usize>)> = Vec::with_capacity(self.groups.len());
        for (gi, g) in self.groups.iter().enumerate() {
            let mine: Vec<&(usize, usize, Tensor)> =
                given.iter().filter(|(at, _, _)| *at == gi).collect();
            if mine.is_empty() {
                new.push((None, Vec::new()));
                continue;
            }
            // A private copy: the caller's tensors must not alias optimizer state.
            let flat = g.params.f_zeros_like()?;
            tch::no_grad(|| -> Result<()> {
                for (_, k, buf) in &mine {
                    g.slice(&flat, *k)?.f_copy_(buf)?;
                }
                Ok(())
            })?;
            let fresh = (0..g.members.len())
                .filter(|k| !mine.iter().any(|(_, m, _)| m == k))
                .collect();
            new.push((Some(flat), fresh));
        }
        for (g, (momentum, fresh)) in self.groups.iter_mut().zip(new) {
            g.momentum = momentum;
            g.fresh = fresh;
        }
        Ok(())
    }

    /// Zeroes every parameter's gradient: one operation per group.
    pub fn zero_grad(&mut self) {
        for g in &self.groups {
            if g.attached(&self.params) {
                let _ = g.grads.shallow_clone().f_zero_();
            } else {
                // Moved out of our storage since the last step; the next step moves
                // it back.
                for &i in &g.members {
                    if let Ok(mut grad) = self.params[i].1.f_grad() {
                        if grad.defined() {
                            let _ = grad.f_zero_();
                        }
                    }
                }
            }
        }
    }

    /// `zero_grad`, `loss.backward()`, `step`.
    pub fn backward_step(&mut self, loss: &Tensor) -> Result<()> {
        self.zero_grad();
        loss.f_backward()?;
        self.step()
    }

    /// Applies one update from the gradients currently held by the parameters.
    pub fn step(&mut self) -> Result<()> {
        let mut ops = Ops::default();
        for g in &mut self.groups {
            if !g.attached(&self.params) {
                g.attach(&self.params, &mut ops)?;
            }
            tch::no_grad(|| g.update(self.config, &mut ops))?;
        }
        self.step_ops = ops.0;
        Ok(())
    }

    /// How many tensor operations (kernels, on a GPU) the last [`Sgd::step`]
    /// dispatched: a few per dtype and device, whatever the parameter count (more
    /// only in a step that had to re-attach a moved parameter).
    pub fn step_ops(&self) -> usize {
        self.step_ops
    }
}

/// `a += alpha·b` as PyTorch's `a.add_(b, alpha=alpha)`: the same libtorch
/// kernel, one operation (a fused multiply-add on AVX2/AVX-512 CPUs and on CUDA).
fn axpy(a: &mut Tensor, alpha: f64, b: &Tensor, ops: &mut Ops) -> Result<()> {
    ops.0 += 1;
    crate::autograd::add_scaled_(a, b, alpha)
}

#[cfg(test)]
mod tests;
