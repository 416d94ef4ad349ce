//! The models of the labs (an MLP, a small CNN, a small ResNet), each a sequence of
//! named layers that can be cut into stages at any layer name.
//!
//! Two types:
//!
//! * a [`Blueprint`] says which layers a model has, in order, without creating any
//!   parameter; [`Blueprint::build`] creates them under a VarStore path, and
//!   [`Blueprint::split_at`] cuts the blueprint first, so each stage can be built in
//!   its own VarStore (its own device, its own process: pipeline and model parallel);
//! * a [`Stage`] is built layers: a whole model is the one stage holding all of them.
//!   [`Stage::split_at`] cuts a built model into stages that keep sharing its VarStore
//!   (staged backward), and [`Stage::join`] puts stages back together.
//!
//! Each layer's parameters live under the layer's name, e.g. `conv1.weight`,
//! `stage2.0.bn1.running_mean`, whether the model was built whole or in stages, so a
//! checkpoint of the whole model loads into the stages and the other way round.
//!
//! ```no_run
//! use tch::nn::{self, ModuleT};
//! use trainers::models;
//! let vs = nn::VarStore::new(tch::Device::Cpu);
//! let model = models::cnn().build(&vs.root());
//! let logits = model.forward_t(&tch::Tensor::zeros([8, 1, 28, 28], tch::kind::FLOAT_CPU), false);
//! assert_eq!(logits.size(), [8, 10]);
//! let stages = model.split_at(&["fc1"])?; // conv part | dense part, same parameters
//! # Ok::<(), trainers::Error>(())
//! ```

use std::fmt;

use tch::Tensor;
use tch::nn::{self, ModuleT};

use crate::data::{CLASSES, SIDE};
use crate::{Error, Result};

/// One built layer. `ModuleT` already requires `Debug + Send`.
pub type Layer = Box<dyn ModuleT>;

/// Creates one layer's parameters under the path it is given.
pub type LayerBuilder = Box<dyn FnOnce(&nn::Path) -> Layer + Send>;

/// A contiguous run of named, built layers; applying it applies them in order.
#[derive(Debug)]
pub struct Stage {
    layers: Vec<(String, Layer)>,
}

impl Stage {
    /// A stage from already built layers. Names must be unique and non-empty.
    pub fn new(layers: Vec<(String, Layer)>) -> Result<Stage> {
        check_names(layers.iter().map(|(n, _)| n.as_str()))?;
        Ok(Stage { layers })
    }

    /// The layer names, in order.
    pub fn names(&self) -> Vec<&str> {
        self.layers.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// The number of layers.
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    /// Whether the stage has no layers (it then passes its input through).
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// The layers, in order.
    pub fn layers(&self) -> impl Iterator<Item = (&str, &dyn ModuleT)> {
        self.layers.iter().map(|(n, l)| (n.as_str(), l.as_ref()))
    }

    /// Cuts the stage before each named layer: `["conv2", "fc1"]` gives
    /// `[..conv2)`, `[conv2..fc1)`, `[fc1..]`. The names must be layers of this
    /// stage, in order, and not the first layer (that would leave a stage empty).
    /// The pieces keep the very same layers, so their parameters stay in whichever
    /// VarStore they were built in.
    pub fn split_at(self, at: &[&str]) -> Result<Vec<Stage>> {
        Ok(split_named(self.layers, at)?
            .into_iter()
            .map(|layers| Stage { layers })
            .collect())
    }

    /// Concatenates stages, in order, into one.
    pub fn join(stages: impl IntoIterator<Item = Stage>) -> Result<Stage> {
        Stage::new(stages.into_iter().flat_map(|s| s.layers).collect())
    }
}

impl ModuleT for Stage {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        let mut out = xs.shallow_clone();
        for (_, layer) in &self.layers {
            out = layer.forward_t(&out, train);
        }
        out
    }
}

/// The recipe for a model: named layer builders, in order. Nothing is allocated until
/// [`build`](Blueprint::build).
pub struct Blueprint {
    name: String,
    layers: Vec<(String, LayerBuilder)>,
}

impl fmt::Debug for Blueprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Blueprint")
            .field("name", &self.name)
            .field("layers", &self.names())
            .finish()
    }
}

impl Blueprint {
    /// An empty blueprint called `name` (for logs).
    pub fn new(name: impl Into<String>) -> Blueprint {
        Blueprint {
            name: name.into(),
            layers: Vec::new(),
        }
    }

    /// Appends a layer. Its parameters will be created under `name`, which must be
    /// unique, non-empty and free of `.` (the VarStore path separator).
    pub fn layer(
        mut self,
        name: &str,
        build: impl FnOnce(&nn::Path) -> Layer + Send + 'static,
    ) -> Result<Blueprint> {
        check_names(self.names().into_iter().chain([name]))?;
        self.layers.push((name.to_owned(), Box::new(build)));
        Ok(self)
    }

    /// Appends a layer whose name is known to be valid (the built-in models'; a test
    /// checks them all through [`check_names`]).
    fn add(mut self, name: &str, build: impl FnOnce(&nn::Path) -> Layer + Send + 'static) -> Self {
        self.layers.push((name.to_owned(), Box::new(build)));
        self
    }

    /// The model's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The layer names, in order: the points [`split_at`](Self::split_at) accepts.
    pub fn names(&self) -> Vec<&str> {
        self.layers.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// Cuts the recipe before each named layer (same rules as [`Stage::split_at`]);
    /// each piece is named `model[k]`.
    pub fn split_at(self, at: &[&str]) -> Result<Vec<Blueprint>> {
        let name = self.name;
        Ok(split_named(self.layers, at)?
            .into_iter()
            .enumerate()
            .map(|(k, layers)| Blueprint {
                name: format!("{name}[{k}]"),
                layers,
            })
            .collect())
    }

    /// Creates every layer's parameters under `root / layer_name`.
    ///
    /// Build each blueprint once per VarStore path: tch renames a variable that
    /// already exists (`weight__7`) instead of failing, which would break the
    /// stable names.
    ///
    /// Initial weights are drawn from libtorch's one generator under the
    /// crate's draw lock ([`crate::seed::drawing`]), so that a build here never
    /// lands between another thread's seed and its draw.
    pub fn build(self, root: &nn::Path) -> Stage {
        crate::seed::drawing(|| Stage {
            layers: self
                .layers
                .into_iter()
                .map(|(name, build)| {
                    let layer = build(&(root / name.as_str()));
                    (name, layer)
                })
                .collect(),
        })
    }
}

/// The built-in architectures, by the names binaries accept (`--model cnn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Arch {
    /// [`mlp`] with [`MlpConfig::default`].
    #[value(help = "MLP 784→256→10 (ReLU)")]
    Mlp,
    /// [`cnn`].
    #[value(help = "the classic CNN: 2 conv + 2 linear layers, 225 k parameters")]
    Cnn,
    /// [`resnet`] with [`ResNetConfig::default`].
    #[value(help = "a small ResNet: 3 stages of basic blocks with batch norm")]
    Resnet,
}

impl Arch {
    /// The architecture's blueprint with its default configuration.
    pub fn blueprint(self) -> Blueprint {
        match self {
            Arch::Mlp => mlp(&MlpConfig::default()),
            Arch::Cnn => cnn(),
            Arch::Resnet => resnet(&ResNetConfig::default()),
        }
    }
}

/// Sizes of the [`mlp`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MlpConfig {
    /// Input features (the image is flattened first): 784 for 28×28.
    pub input: i64,
    /// Width of each hidden layer, in order; empty gives logistic regression.
    pub hidden: Vec<i64>,
    /// Output classes.
    pub classes: i64,
}

impl Default for MlpConfig {
    /// 784 → 256 → 10.
    fn default() -> Self {
        MlpConfig {
            input: (SIDE * SIDE) as i64,
            hidden: vec![256],
            classes: CLASSES as i64,
        }
    }
}

/// `flatten, fc1, relu1, fc2, relu2, …, fcK`: linear layers with ReLU between them.
pub fn mlp(cfg: &MlpConfig) -> Blueprint {
    let mut bp = Blueprint::new("mlp").add("flatten", |_| Box::new(Flatten));
    let widths: Vec<i64> = std::iter::once(cfg.input)
        .chain(cfg.hidden.iter().copied())
        .chain([cfg.classes])
        .collect();
    let last = widths.len() - 1;
    for (k, pair) in widths.windows(2).enumerate() {
        let (i, o) = (pair[0], pair[1]);
        bp = bp.add(&format!("fc{}", k + 1), move |p| {
            Box::new(nn::linear(p, i, o, Default::default()))
        });
        if k + 1 < last {
            bp = bp.add(&format!("relu{}", k + 1), |_| Box::new(Relu));
        }
    }
    bp
}

/// The classic small CNN for 28×28 inputs, exactly
/// `Conv(1→32, 3) ReLU MaxPool2 Conv(32→64, 3) ReLU MaxPool2 Flatten Linear(1600→128)
/// ReLU Linear(128→10)`, with layers `conv1 relu1 pool1 conv2 relu2 pool2 flatten fc1
/// relu3 fc2`. 28 → 26 → 13 → 11 → 5, so the flattened size is 64·5·5 = 1600.
pub fn cnn() -> Blueprint {
    Blueprint::new("cnn")
        .add("conv1", |p| {
            Box::new(nn::conv2d(p, 1, 32, 3, Default::default()))
        })
        .add("relu1", |_| Box::new(Relu))
        .add("pool1", |_| Box::new(MaxPool2))
        .add("conv2", |p| {
            Box::new(nn::conv2d(p, 32, 64, 3, Default::default()))
        })
        .add("relu2", |_| Box::new(Relu))
        .add("pool2", |_| Box::new(MaxPool2))
        .add("flatten", |_| Box::new(Flatten))
        .add("fc1", |p| {
            Box::new(nn::linear(p, 1600, 128, Default::default()))
        })
        .add("relu3", |_| Box::new(Relu))
        .add("fc2", |p| {
            Box::new(nn::linear(p, 128, CLASSES as i64, Default::default()))
        })
}

/// Sizes of the [`resnet`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResNetConfig {
    /// Input channels (1 for grey images).
    pub in_channels: i64,
    /// Channels of the stem and the first stage; each later stage doubles them.
    pub width: i64,
    /// Basic blocks in each of the three stages: `[1, 1, 1]` is ResNet-8, `[3, 3, 3]`
    /// the CIFAR ResNet-20.
    pub blocks: [usize; 3],
    /// Output classes.
    pub classes: i64,
}

impl Default for ResNetConfig {
    /// ResNet-8, 16 channels: small enough to train on a CPU.
    fn default() -> Self {
        ResNetConfig {
            in_channels: 1,
            width: 16,
            blocks: [1, 1, 1],
            classes: CLASSES as i64,
        }
    }
}

/// A CIFAR-style ResNet: `stem` (3×3 conv, batch norm, ReLU), `stage1..3` of basic
/// blocks (the 2nd and 3rd halve the resolution and double the channels, with a
/// 1×1 conv + batch norm shortcut), `pool` (global average), `fc`.
///
/// Parameter names: `stem.conv.weight`, `stem.bn.{weight,bias,running_mean,running_var}`,
/// `stageS.B.{conv1,bn1,conv2,bn2}.*`, `stageS.B.shortcut.{conv,bn}.*`, `fc.{weight,bias}`.
pub fn resnet(cfg: &ResNetConfig) -> Blueprint {
    let (cin, w) = (cfg.in_channels, cfg.width);
    let mut bp = Blueprint::new("resnet").add("stem", move |p| {
        Box::new(ConvBn::new(&(p / "conv"), &(p / "bn"), cin, w, 3, 1).with_relu())
    });
    let mut channels = w;
    for (s, &blocks) in cfg.blocks.iter().enumerate() {
        let (input, output) = (channels, w << s);
        let stride = if s == 0 { 1 } else { 2 };
        bp = bp.add(&format!("stage{}", s + 1), move |p| {
            Box::new(Blocks(
                (0..blocks)
                    .map(|b| {
                        let (i, st) = if b == 0 { (input, stride) } else { (output, 1) };
                        BasicBlock::new(&(p / b), i, output, st)
                    })
                    .collect(),
            ))
        });
        // An empty stage passes its input through unchanged.
        if blocks > 0 {
            channels = output;
        }
    }
    let classes = cfg.classes;
    bp.add("pool", |_| Box::new(GlobalAvgPool))
        .add("fc", move |p| {
            Box::new(nn::linear(p, channels, classes, Default::default()))
        })
}

/// The number of trainable scalars in a VarStore (batch-norm running statistics are
/// not trainable and not counted).
pub fn param_count(vs: &nn::VarStore) -> usize {
    vs.trainable_variables().iter().map(|t| t.numel()).sum()
}

/// Names must be non-empty, unique, and usable as a VarStore path component.
fn check_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    for name in names {
        if name.is_empty() || name.contains('.') {
            return Err(Error::Model(format!(
                "layer name {name:?} must be non-empty and contain no '.'"
            )));
        }
        if !seen.insert(name) {
            return Err(Error::Model(format!("two layers are named {name:?}")));
        }
    }
    Ok(())
}

/// Cuts `items` before each named item; see [`Stage::split_at`].
fn split_named<T>(items: Vec<(String, T)>, at: &[&str]) -> Result<Vec<Vec<(String, T)>>> {
    let names: Vec<&str> = items.iter().map(|(n, _)| n.as_str()).collect();
    let mut cuts = Vec::with_capacity(at.len());
    for &name in at {
        let pos = names.iter().position(|&n| n == name).ok_or_else(|| {
            Error::Model(format!(
                "cannot split at {name:?}: no such layer (layers: {})",
                names.join(" ")
            ))
        })?;
        if pos == 0 {
            return Err(Error::Model(format!(
                "cannot split at {name:?}: it is the first layer, the stage before it \
                 would be empty"
            )));
        }
        if let Some(&prev) = cuts.last().filter(|&&prev| pos <= prev) {
            return Err(Error::Model(format!(
                "split points must follow the layer order without repeats: {name:?} \
                 does not come after {:?} (layers: {})",
                names[prev],
                names.join(" ")
            )));
        }
        cuts.push(pos);
    }
    let mut stages = Vec::with_capacity(cuts.len() + 1);
    let mut rest = items;
    // Cut from the back so earlier positions stay valid.
    for &pos in cuts.iter().rev() {
        stages.push(rest.split_off(pos));
    }
    stages.push(rest);
    stages.reverse();
    Ok(stages)
}

/// `relu`.
#[derive(Debug, Clone, Copy)]
struct Relu;

impl nn::Module for Relu {
    fn forward(&self, xs: &Tensor) -> Tensor {
        xs.relu()
    }
}

/// 2×2 max pooling, stride 2.
#[derive(Debug, Clone, Copy)]
struct MaxPool2;

impl nn::Module for MaxPool2 {
    fn forward(&self, xs: &Tensor) -> Tensor {
        xs.max_pool2d_default(2)
    }
}

/// `[N, ...] → [N, features]`.
#[derive(Debug, Clone, Copy)]
struct Flatten;

impl nn::Module for Flatten {
    fn forward(&self, xs: &Tensor) -> Tensor {
        xs.flatten(1, -1)
    }
}

/// `[N, C, H, W] → [N, C]`, the mean over each channel.
#[derive(Debug, Clone, Copy)]
struct GlobalAvgPool;

impl nn::Module for GlobalAvgPool {
    fn forward(&self, xs: &Tensor) -> Tensor {
        xs.adaptive_avg_pool2d([1, 1]).flatten(1, -1)
    }
}

/// A bias-free convolution followed by batch norm (the norm's shift is the bias).
#[derive(Debug)]
struct ConvBn {
    conv: nn::Conv2D,
    bn: nn::BatchNorm,
    relu: bool,
}

impl ConvBn {
    fn new(conv: &nn::Path, bn: &nn::Path, cin: i64, cout: i64, k: i64, stride: i64) -> Self {
        let cfg = nn::ConvConfig {
            stride,
            padding: k / 2,
            bias: false,
            ..Default::default()
        };
        ConvBn {
            conv: nn::conv2d(conv, cin, cout, k, cfg),
            bn: nn::batch_norm2d(bn, cout, Default::default()),
            relu: false,
        }
    }

    fn with_relu(mut self) -> Self {
        self.relu = true;
        self
    }
}

impl ModuleT for ConvBn {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        let y = xs.apply(&self.conv).apply_t(&self.bn, train);
        if self.relu { y.relu() } else { y }
    }
}

/// `relu(bn(conv(relu(bn(conv(x))))) + shortcut(x))`.
#[derive(Debug)]
struct BasicBlock {
    first: ConvBn,
    second: ConvBn,
    /// Present when the block changes resolution or channels.
    shortcut: Option<ConvBn>,
}

impl BasicBlock {
    fn new(p: &nn::Path, cin: i64, cout: i64, stride: i64) -> Self {
        let shortcut = (stride != 1 || cin != cout).then(|| {
            let s = p / "shortcut";
            ConvBn::new(&(&s / "conv"), &(&s / "bn"), cin, cout, 1, stride)
        });
        BasicBlock {
            first: ConvBn::new(&(p / "conv1"), &(p / "bn1"), cin, cout, 3, stride).with_relu(),
            second: ConvBn::new(&(p / "conv2"), &(p / "bn2"), cout, cout, 3, 1),
            shortcut,
        }
    }
}

impl ModuleT for BasicBlock {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        let y = self
            .second
            .forward_t(&self.first.forward_t(xs, train), train);
        let skip = match &self.shortcut {
            Some(s) => s.forward_t(xs, train),
            None => xs.shallow_clone(),
        };
        (y + skip).relu()
    }
}

/// Basic blocks applied in order (one ResNet stage).
#[derive(Debug)]
struct Blocks(Vec<BasicBlock>);

impl ModuleT for Blocks {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        let mut out = xs.shallow_clone();
        for block in &self.0 {
            out = block.forward_t(&out, train);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use tch::{Device, nn::OptimizerConfig};

    /// `--model`'s help once showed rustdoc markup and a wrong size: it now says the
    /// CNN's parameter count, which must stay true.
    #[test]
    fn model_help_states_the_cnn_parameter_count() {
        use clap::ValueEnum;
        let vs = nn::VarStore::new(Device::Cpu);
        let _ = cnn().build(&vs.root());
        let n: i64 = vs
            .trainable_variables()
            .iter()
            .map(|t| t.numel() as i64)
            .sum();
        assert_eq!(n, 225_034);
        let help = Arch::Cnn.to_possible_value().unwrap();
        let help = help.get_help().unwrap().to_string();
        assert!(help.contains("225 k") && !help.contains('['), "{help}");
    }

    /// Deterministic inputs from the synthetic set's own generator: the global torch
    /// RNG is shared by the tests running in parallel, so `manual_seed` + `randn`
    /// could interleave with another test's draws.
    fn input(n: usize) -> Tensor {
        crate::data::synthetic(n, 11).unwrap().images
    }

    fn all() -> Vec<Blueprint> {
        vec![
            mlp(&MlpConfig::default()),
            cnn(),
            resnet(&ResNetConfig::default()),
            mlp(&MlpConfig {
                hidden: vec![],
                ..Default::default()
            }),
            resnet(&ResNetConfig {
                blocks: [2, 0, 3],
                width: 8,
                ..Default::default()
            }),
        ]
    }

    fn names(vs: &nn::VarStore) -> BTreeSet<String> {
        vs.variables().into_keys().collect()
    }

    #[test]
    fn built_in_layer_names_are_valid() {
        for bp in all() {
            check_names(bp.names()).unwrap();
        }
        for arch in [Arch::Mlp, Arch::Cnn, Arch::Resnet] {
            check_names(arch.blueprint().names()).unwrap();
        }
    }

    #[test]
    fn every_model_maps_images_to_ten_logits() {
        tch::set_num_threads(1);
        for bp in all() {
            let name = bp.name().to_owned();
            let vs = nn::VarStore::new(Device::Cpu);
            let model = bp.build(&vs.root());
            for train in [false, true] {
                let y = model.forward_t(&input(3), train);
                assert_eq!(y.size(), [3, 10], "{name} train={train}");
            }
        }
    }

    #[test]
    fn cnn_parameter_count_and_names_are_as_computed_by_hand() {
        let vs = nn::VarStore::new(Device::Cpu);
        let _model = cnn().build(&vs.root());
        // conv1: 32·1·3·3 + 32 = 320        conv2: 64·32·3·3 + 64 = 18,496
        // fc1: 1600·128 + 128 = 204,928     fc2: 128·10 + 10 = 1,290
        assert_eq!(param_count(&vs), 320 + 18_496 + 204_928 + 1_290);
        assert_eq!(param_count(&vs), 225_034);
        let want: BTreeSet<String> = ["conv1", "conv2", "fc1", "fc2"]
            .iter()
            .flat_map(|l| [format!("{l}.weight"), format!("{l}.bias")])
            .collect();
        assert_eq!(names(&vs), want);
        assert_eq!(vs.variables()["fc1.weight"].size(), [128, 1600]);
    }

    #[test]
    fn mlp_and_resnet_parameter_counts() {
        let vs = nn::VarStore::new(Device::Cpu);
        let _ = mlp(&MlpConfig::default()).build(&vs.root());
        assert_eq!(param_count(&vs), 784 * 256 + 256 + 256 * 10 + 10);

        let vs = nn::VarStore::new(Device::Cpu);
        let _ = resnet(&ResNetConfig::default()).build(&vs.root());
        let bn = |c: usize| 2 * c; // trainable: weight + bias
        let conv = |i: usize, o: usize, k: usize| i * o * k * k;
        let stem = conv(1, 16, 3) + bn(16);
        let stage1 = conv(16, 16, 3) + bn(16) + conv(16, 16, 3) + bn(16);
        let stage2 = conv(16, 32, 3) + bn(32) + conv(32, 32, 3) + bn(32) + conv(16, 32, 1) + bn(32);
        let stage3 = conv(32, 64, 3) + bn(64) + conv(64, 64, 3) + bn(64) + conv(32, 64, 1) + bn(64);
        let fc = 64 * 10 + 10;
        assert_eq!(param_count(&vs), stem + stage1 + stage2 + stage3 + fc);
        let all = names(&vs);
        for n in [
            "stem.conv.weight",
            "stem.bn.running_mean",
            "stage1.0.conv1.weight",
            "stage2.0.shortcut.conv.weight",
            "stage3.0.bn2.running_var",
            "fc.bias",
        ] {
            assert!(all.contains(n), "{n} missing from {all:?}");
        }
        assert!(
            !all.iter().any(|n| n.contains("__")),
            "renamed duplicates: {all:?}"
        );
    }

    #[test]
    fn split_then_compose_equals_the_unsplit_forward_exactly() {
        tch::set_num_threads(1);
        let cases: [(Blueprint, &[&str]); 3] = [
            (cnn(), &["conv2", "fc1"]),
            (mlp(&MlpConfig::default()), &["fc2"]),
            (
                resnet(&ResNetConfig::default()),
                &["stage1", "stage3", "fc"],
            ),
        ];
        for (bp, at) in cases {
            let name = bp.name().to_owned();
            let vs = nn::VarStore::new(Device::Cpu);
            let model = bp.build(&vs.root());
            let x = input(5);
            let whole = model.forward_t(&x, false);
            let stages = model.split_at(at).unwrap();
            assert_eq!(stages.len(), at.len() + 1);
            for (stage, &first) in stages[1..].iter().zip(at) {
                assert_eq!(stage.names()[0], first, "{name}");
            }
            let piecewise = stages
                .iter()
                .fold(x.shallow_clone(), |h, s| s.forward_t(&h, false));
            assert!(
                piecewise.equal(&whole),
                "{name}: stages differ from the whole"
            );
            let joined = Stage::join(stages).unwrap();
            assert!(joined.forward_t(&x, false).equal(&whole), "{name}: join");
        }
    }

    /// Stages built from a split blueprint in their own VarStores hold exactly the
    /// whole model's parameter names, and checkpoints move both ways.
    #[test]
    fn per_stage_varstores_load_the_whole_model_checkpoint_and_back() {
        tch::set_num_threads(1);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("whole.safetensors");
        let at: &[&str] = &["stage2", "pool"];
        let whole_vs = nn::VarStore::new(Device::Cpu);
        let whole = resnet(&ResNetConfig::default()).build(&whole_vs.root());
        whole_vs.save(&file).unwrap();

        let mut stage_vss = Vec::new();
        let mut stages = Vec::new();
        for bp in resnet(&ResNetConfig::default()).split_at(at).unwrap() {
            let mut vs = nn::VarStore::new(Device::Cpu);
            stages.push(bp.build(&vs.root()));
            vs.load(&file).unwrap();
            stage_vss.push(vs);
        }
        let union: BTreeSet<String> = stage_vss.iter().flat_map(names).collect();
        assert_eq!(union, names(&whole_vs));
        let x = input(4);
        let want = whole.forward_t(&x, false);
        let got = stages.iter().fold(x, |h, s| s.forward_t(&h, false));
        assert!(got.equal(&want), "stages with loaded weights differ");

        // And back: a fresh whole model from the stages' checkpoints.
        let mut fresh_vs = nn::VarStore::new(Device::Cpu);
        let fresh = resnet(&ResNetConfig::default()).build(&fresh_vs.root());
        let mut missing: BTreeSet<String> = names(&fresh_vs);
        for (k, vs) in stage_vss.iter().enumerate() {
            let f = dir.path().join(format!("stage{k}.safetensors"));
            vs.save(&f).unwrap();
            let not_in_file: BTreeSet<String> =
                fresh_vs.load_partial(&f).unwrap().into_iter().collect();
            missing = missing.intersection(&not_in_file).cloned().collect();
        }
        assert!(missing.is_empty(), "never loaded: {missing:?}");
        assert!(fresh.forward_t(&input(4), false).equal(&want));
    }

    #[test]
    fn bad_split_points_are_errors() {
        let names = |r: Result<Vec<Blueprint>>| r.unwrap_err().to_string();
        let e = names(cnn().split_at(&["conv9"]));
        assert!(e.contains("conv9") && e.contains("conv1 relu1"), "{e}");
        let e = names(cnn().split_at(&["conv1"]));
        assert!(e.contains("first layer"), "{e}");
        let e = names(cnn().split_at(&["fc1", "conv2"]));
        assert!(e.contains("order"), "{e}");
        let e = names(cnn().split_at(&["fc1", "fc1"]));
        assert!(e.contains("order"), "{e}");
        assert_eq!(cnn().split_at(&[]).unwrap().len(), 1);
        assert!(
            Blueprint::new("x")
                .layer("a.b", |_| Box::new(Relu))
                .is_err()
        );
        let dup = Blueprint::new("x").layer("a", |_| Box::new(Relu)).unwrap();
        assert!(dup.layer("a", |_| Box::new(Relu)).is_err());
    }

    /// Data, batches and a split model on the GPU; a visible skip without one
    /// (RINGSIDE_REQUIRE_CUDA=1 makes that a failure, as in lib.rs).
    #[test]
    fn split_cnn_runs_on_cuda_or_visible_skip() {
        if !tch::Cuda::is_available() {
            return collectives::testing::skip_without_cuda(
                "split_cnn_runs_on_cuda_or_visible_skip",
                &format!("no CUDA device ({})", crate::torch_info()),
            );
        }
        let dev = Device::Cuda(0);
        let data = crate::data::synthetic(32, 5)
            .unwrap()
            .to_device(dev)
            .unwrap();
        let (x, y) = data.batch(&[3, 1, 4, 1, 5]).unwrap();
        assert_eq!((x.device(), y.device()), (dev, dev));
        let cpu_vs = nn::VarStore::new(Device::Cpu);
        let cpu_model = cnn().build(&cpu_vs.root());
        let mut stages = Vec::new();
        let mut vss = Vec::new();
        for bp in cnn().split_at(&["fc1"]).unwrap() {
            let mut vs = nn::VarStore::new(dev);
            stages.push(bp.build(&vs.root()));
            vs.copy(&cpu_vs).unwrap();
            vss.push(vs);
        }
        let got = stages
            .iter()
            .fold(x.shallow_clone(), |h, s| s.forward_t(&h, false));
        assert_eq!(got.device(), dev);
        let want = cpu_model.forward_t(&x.to_device(Device::Cpu), false);
        let diff = (got.to_device(Device::Cpu) - want)
            .abs()
            .max()
            .double_value(&[]);
        assert!(diff < 1e-4, "GPU and CPU logits differ by {diff}");
    }

    fn loss_on(model: &Stage, x: &Tensor, y: &Tensor) -> Tensor {
        model.forward_t(x, true).cross_entropy_for_logits(y)
    }

    #[test]
    fn one_sgd_step_reduces_the_loss_on_synthetic_data() {
        tch::set_num_threads(1);
        let data = crate::data::synthetic(64, 3).unwrap();
        for bp in all() {
            let name = bp.name().to_owned();
            let vs = nn::VarStore::new(Device::Cpu);
            let model = crate::seed::seeded(0, || bp.build(&vs.root()));
            let mut opt = nn::Sgd::default().build(&vs, 0.01).unwrap();
            let before = loss_on(&model, &data.images, &data.labels);
            opt.backward_step(&before);
            let after = loss_on(&model, &data.images, &data.labels);
            let (b, a) = (before.double_value(&[]), after.double_value(&[]));
            assert!(a < b, "{name}: loss {b} -> {a}");
        }
    }

    /// 100 Adam steps of 64 on 2,000 real training images; accuracy on 1,000 test
    /// images must be far above chance (10%).
    #[test]
    fn cnn_learns_real_fashion_mnist_in_100_steps() {
        // One thread: on a shared 2-core machine two OpenMP threads spin-waiting on
        // each other made this 12-23 s instead of 3.5 s.
        tch::set_num_threads(1);
        let dir = crate::data::DEFAULT_DIR;
        let train = crate::data::load(dir, crate::data::Split::Train)
            .unwrap()
            .head(2000)
            .unwrap();
        let test = crate::data::load(dir, crate::data::Split::Test)
            .unwrap()
            .head(1000)
            .unwrap();
        let vs = nn::VarStore::new(Device::Cpu);
        let model = crate::seed::seeded(0, || cnn().build(&vs.root()));
        let mut opt = nn::Adam::default().build(&vs, 1e-3).unwrap();
        let sampler = crate::sampler::DistributedSampler::new(train.len(), 1, 0).unwrap();
        let mut step = 0;
        'train: for epoch in 0.. {
            let mut s = sampler.clone();
            s.set_epoch(epoch);
            for batch in s.indices().chunks(64) {
                let (x, y) = train.batch(batch).unwrap();
                opt.backward_step(&loss_on(&model, &x, &y));
                step += 1;
                if step == 100 {
                    break 'train;
                }
            }
        }
        let acc = tch::no_grad(|| {
            model
                .forward_t(&test.images, false)
                .accuracy_for_logits(&test.labels)
                .double_value(&[])
        });
        assert!(acc > 0.6, "test accuracy {acc} after 100 steps");
    }
}
