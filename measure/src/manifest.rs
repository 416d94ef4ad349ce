//! The manifest every results file carries: which build measured what, on
//! which machine, with which libraries and settings (so a number can be
//! traced and reproduced).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

/// Environment variables that change how the libraries behave. The job token
/// is a secret and is never recorded.
fn recorded_env() -> serde_json::Map<String, Value> {
    let mut vars: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| {
            [
                "GLOO_",
                "NCCL_",
                "OMPI_",
                "PMIX_",
                "RINGSIDE_",
                "MASTER_",
                "OMP_",
                "CUDA_",
            ]
            .iter()
            .any(|p| k.starts_with(p))
                && k != "RINGSIDE_JOB_TOKEN"
        })
        .collect();
    vars.sort();
    vars.into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect()
}

/// The torch package directory (`.../site-packages/torch`) set-up linked,
/// or where `RINGSIDE_TORCH_DIR` points.
pub fn torch_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("RINGSIDE_TORCH_DIR") {
        return Some(PathBuf::from(d));
    }
    let built = option_env!("LIBTORCH").map(PathBuf::from)?;
    built.canonicalize().ok()
}

/// The repository this binary was built from (for the torch peer's script,
/// Python, and the labs' results folder when nothing names them).
pub fn workspace_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

fn dpkg_version(package: &str) -> Option<String> {
    let out = Command::new("dpkg-query")
        .args(["-W", "-f=${Version}", package])
        .output()
        .ok()?;
    let v = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (out.status.success() && !v.is_empty()).then_some(v)
}

/// `__version__` from torch's version.py (e.g. `2.11.0+cu130`).
fn torch_version(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("version.py")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("__version__"))
        .and_then(|rest| rest.split(['\'', '"']).nth(1))
        .map(str::to_owned)
}

/// The NCCL wheel's version from its dist-info next to torch.
fn nccl_version(torch: &Path) -> Option<String> {
    let site = torch.parent()?;
    std::fs::read_dir(site).ok()?.flatten().find_map(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        name.strip_prefix("nvidia_nccl")
            .and_then(|rest| rest.strip_suffix(".dist-info"))
            .and_then(|rest| rest.rsplit('-').next())
            .map(str::to_owned)
    })
}

fn first_line_with(path: &str, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_once([':', '=']))
        .map(|(_, v)| v.trim().trim_matches('"').to_owned())
}

/// The NVIDIA GPUs the driver shows (`Model:` of each
/// `/proc/driver/nvidia/gpus/*/information`), in bus order; none without the
/// driver. Read from the driver's files rather than through CUDA, so recording a
/// run never initialises a device.
fn gpus_in(driver: &std::path::Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(driver) else {
        return Vec::new();
    };
    let mut dirs: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    dirs.sort();
    dirs.iter()
        .filter_map(|d| {
            let text = std::fs::read_to_string(d.join("information")).ok()?;
            text.lines()
                .find_map(|l| l.strip_prefix("Model:"))
                .map(|m| m.trim().to_owned())
        })
        .collect()
}

/// CPUs online on the host (not this process's affinity mask: a launcher that
/// binds each rank to one core must not make the machine look like one core).
fn online_cpus() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let n = text.lines().filter(|l| l.starts_with("processor")).count();
    (n > 0).then_some(n)
}

/// The 1-minute load average (`/proc/loadavg`'s first field).
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// One line naming the machine a measurement ran on and how busy it was at
/// the start: CPU model, cores, load average. Figures carry their machine.
pub fn machine_line() -> String {
    let cpu =
        first_line_with("/proc/cpuinfo", "model name").unwrap_or_else(|| "unknown CPU".into());
    let cores = online_cpus().map_or_else(|| "? cores".into(), |n| format!("{n} cores"));
    let load = load_average().map_or_else(|| "unknown".into(), |l| format!("{l:.2}"));
    format!("{cpu}, {cores}; load average {load} at the start")
}

/// A warning when the machine is busier than it has cores (load average
/// above the core count): other programs then compete with every rank for
/// a core, and timings say more about them than about the code measured.
pub fn load_warning() -> Option<String> {
    busy_warning(load_average()?, online_cpus()?)
}

fn busy_warning(load: f64, cores: usize) -> Option<String> {
    (load > cores as f64).then(|| {
        format!(
            "the load average ({load:.1}) is above this machine's {cores} cores: other programs \
             compete with the ranks, so these timings are not honest idle figures (stop them, \
             or keep the load and say so; `ringside bench --load N` reproduces a busy machine \
             on purpose)"
        )
    })
}

fn host() -> Value {
    let mem_kib = first_line_with("/proc/meminfo", "MemTotal")
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok());
    json!({
        "hostname": std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|s| s.trim().to_owned()),
        "cpu": first_line_with("/proc/cpuinfo", "model name"),
        "cores": online_cpus(),
        "gpus": gpus_in(std::path::Path::new("/proc/driver/nvidia/gpus")),
        "load_average": load_average(),
        "memory_bytes": mem_kib.map(|k| k * 1024),
        "os": first_line_with("/etc/os-release", "PRETTY_NAME"),
    })
}

/// What a results-writing binary records about its own build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Build {
    /// The crate version.
    pub version: &'static str,
    /// The git commit it was built from (`-dirty` when the tree had changes).
    pub git_sha: &'static str,
    /// `rustc --version`.
    pub rustc: &'static str,
}

/// The [`Build`] of the crate this macro is used in, whose build script must call
/// [`crate::build_script::emit`].
#[macro_export]
macro_rules! build {
    () => {
        $crate::manifest::Build {
            version: env!("CARGO_PKG_VERSION"),
            git_sha: env!("RINGSIDE_GIT_SHA"),
            rustc: env!("RINGSIDE_RUSTC"),
        }
    };
}

/// The manifest for a run of `world` ranks over `transport` by a binary of
/// `build`, with `combine` the rule by which ranks' times became one (`max`: the
/// slowest rank).
pub fn manifest(build: &Build, world: usize, transport: &str, combine: &str) -> Value {
    let torch = torch_dir();
    let args: Vec<String> = std::env::args().collect();
    json!({
        "created": created(),
        "command": args.join(" "),
        "ringside": {
            "version": build.version,
            "git_sha": build.git_sha,
            "rustc": build.rustc,
        },
        "libraries": {
            "gloo": dpkg_version("libgloo-dev"),
            "openmpi": dpkg_version("libopenmpi-dev"),
            "nccl": torch.as_deref().and_then(nccl_version),
            "torch": torch.as_deref().and_then(torch_version),
        },
        "host": host(),
        "env": recorded_env(),
        "world": world,
        "transport": transport,
        "combine": combine,
    })
}

/// A results folder's name: now as a UTC stamp to the microsecond, then this
/// process's id, e.g. `20261121-103000.123456-p4242`.
///
/// Unique to this process and microsecond, so two runs started in the same
/// second no longer share (and overwrite) one folder, as they did when the
/// stamp stopped at seconds. Names sort by time: the fixed-width stamp comes
/// first, and a folder named by an older build (`20261121-103000`) sorts
/// before every newer one of its second.
pub fn stamp() -> String {
    let now = since_epoch();
    format!(
        "{}.{:06}-p{}",
        civil(now.as_secs())
            .replace(['-', ':'], "")
            .replace('T', "-")
            .trim_end_matches('Z'),
        now.subsec_micros(),
        std::process::id()
    )
}

/// Now as RFC 3339 UTC, to the second.
fn created() -> String {
    civil(since_epoch().as_secs())
}

fn since_epoch() -> std::time::Duration {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
}

/// `secs` after the epoch as RFC 3339 UTC, without a date crate: days from the
/// epoch by the civil-from-days algorithm (proleptic Gregorian calendar).
fn civil(secs: u64) -> String {
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GPU reference runs of labs 2, 4 and 5 recorded the CPU and its cores
    /// but not the GPU they were about.
    #[test]
    fn a_gpu_run_recorded_no_gpu() {
        let dir = std::env::temp_dir().join(format!("ringside-gpus-{}", std::process::id()));
        for (bus, model) in [
            ("0000:1b:00.0", "NVIDIA H100 80GB HBM3"),
            ("0000:0a:00.0", "NVIDIA A10"),
        ] {
            std::fs::create_dir_all(dir.join(bus)).unwrap();
            std::fs::write(
                dir.join(bus).join("information"),
                format!("Model: \t\t {model}\nIRQ:   \t\t 42\n"),
            )
            .unwrap();
        }
        assert_eq!(gpus_in(&dir), ["NVIDIA A10", "NVIDIA H100 80GB HBM3"]);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(gpus_in(&dir).is_empty());
    }

    /// The tour under a load average of 3 on 2 cores drew Gloo 15-20x slower
    /// than torch's and said nothing: a busier-than-its-cores machine is named.
    #[test]
    fn tour_under_load_said_nothing_about_the_load() {
        let w = busy_warning(3.0, 2).expect("load 3 on 2 cores is busy");
        assert!(w.contains("(3.0)") && w.contains("2 cores"), "{w}");
        assert_eq!(busy_warning(1.5, 2), None);
        assert_eq!(
            busy_warning(2.0, 2),
            None,
            "exactly the core count is not above it"
        );
        assert!(
            machine_line().contains("load average"),
            "{}",
            machine_line()
        );
    }

    #[test]
    fn manifest_has_the_promised_fields_and_no_token() {
        // SAFETY: single-threaded test setup; no other thread reads the environment.
        unsafe { std::env::set_var("RINGSIDE_JOB_TOKEN", "secret") };
        let build = Build {
            version: "0.1.0",
            git_sha: "749c484",
            rustc: "rustc 1.95.0",
        };
        let m = manifest(&build, 2, "tcp", "max");
        for key in ["created", "command", "ringside", "libraries", "host", "env"] {
            assert!(m.get(key).is_some(), "{key} missing: {m}");
        }
        assert!(
            m["ringside"]["git_sha"]
                .as_str()
                .is_some_and(|s| !s.is_empty())
        );
        assert!(m["env"].get("RINGSIDE_JOB_TOKEN").is_none());
        assert_eq!(m["world"], 2);
        let c = m["created"].as_str().unwrap();
        assert_eq!(c.len(), 20, "{c}");
        assert!(c.starts_with("20"), "{c}");
    }

    #[test]
    fn stamps_sort_by_time_after_old_second_stamps_and_name_the_process() {
        assert_eq!(civil(0), "1970-01-01T00:00:00Z");
        assert_eq!(civil(1_795_696_666), "2026-11-26T12:37:46Z");
        let a = stamp();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = stamp();
        assert!(a < b, "{a} then {b}");
        // `20261126-121746.123456-p4242`: 15 + 7 characters, then the pid.
        assert_eq!(a.as_bytes()[15], b'.', "{a}");
        assert!(a.ends_with(&format!("-p{}", std::process::id())), "{a}");
        // A folder an older build named for the same second sorts first.
        assert!(&a[..15] < a.as_str(), "{a}");
    }
}
