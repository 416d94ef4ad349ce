//! Loads every built page in headless Chromium, the way a reader's browser would,
//! and fails on a page that shows no text or has an image that did not load (a
//! figure the chapter names but the run did not draw). One Chromium process: a
//! harness page opens each page in an iframe in turn and records what it finds in
//! its own DOM, which `--dump-dom` prints.

use anyhow::{Context, Result, bail};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const HARNESS: &str = r#"<!doctype html><html><body><ul id="r"></ul><script>
const pages = PAGES;
let i = 0;
function report(p, bad, text) {
  const li = document.createElement('li');
  li.setAttribute('data-page', p);
  li.setAttribute('data-bad', bad.join(' '));
  li.setAttribute('data-text', text);
  document.getElementById('r').appendChild(li);
}
function next() {
  if (i >= pages.length) { document.title = 'done'; return; }
  const p = pages[i++];
  const f = document.createElement('iframe');
  f.width = 1200; f.height = 900; f.src = p;
  f.onload = () => {
    try {
      const d = f.contentDocument;
      const imgs = [...d.images];
      Promise.all(imgs.map(im => im.complete ? 0 :
          new Promise(r => { im.addEventListener('load', r); im.addEventListener('error', r); })))
        .then(() => {
          const bad = imgs.filter(im => !(im.complete && im.naturalWidth > 0))
                          .map(im => im.getAttribute('src'));
          report(p, bad, d.body ? d.body.innerText.trim().length : 0);
          f.remove(); next();
        });
    } catch (e) { report(p, ['(cannot inspect the page: ' + e + ')'], 0); f.remove(); next(); }
  };
  document.body.appendChild(f);
}
next();
</script></body></html>"#;

/// Every page in `pages` (files under `out`) loads with text and no broken image.
pub fn no_broken_images(out: &Path, pages: &[PathBuf]) -> Result<()> {
    let rel: Vec<String> = pages
        .iter()
        .filter(|p| p.file_name().is_some_and(|n| n != "404.html"))
        .filter_map(|p| p.strip_prefix(out).ok())
        .map(|p| p.display().to_string())
        .collect();
    let harness = out.join("render-harness.html");
    std::fs::write(
        &harness,
        HARNESS.replace("PAGES", &serde_json::to_string(&rel)?),
    )?;
    let profile = tempfile::tempdir()?;
    let dom = run_chromium(&harness, profile.path(), Duration::from_secs(120))?;
    std::fs::remove_file(&harness)?;
    let mut problems = Vec::new();
    let mut seen = 0;
    for li in dom.split("<li ").skip(1) {
        seen += 1;
        let attr = |name: &str| {
            li.split_once(&format!("{name}=\""))
                .and_then(|(_, rest)| rest.split_once('"'))
                .map(|(v, _)| v.to_owned())
                .unwrap_or_default()
        };
        let (page, bad, text) = (attr("data-page"), attr("data-bad"), attr("data-text"));
        if !bad.is_empty() {
            problems.push(format!("{page}: images that did not load: {bad}"));
        }
        if text == "0" {
            problems.push(format!("{page}: renders no text"));
        }
    }
    if seen != rel.len() {
        problems.push(format!(
            "Chromium reported on {seen} of {} pages (did it time out?)",
            rel.len()
        ));
    }
    if !problems.is_empty() {
        bail!("{}", problems.join("\n"));
    }
    Ok(())
}

/// `chromium --headless --dump-dom` on a file, with a deadline.
fn run_chromium(page: &Path, profile: &Path, limit: Duration) -> Result<String> {
    let mut child = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-quic",
            // The harness reads the pages' DOM; file:// pages are otherwise
            // each their own origin.
            "--allow-file-access-from-files",
            "--virtual-time-budget=60000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("file://{}", page.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting chromium (the set-up installs Debian's chromium package)")?;
    let mut stdout = child.stdout.take().context("chromium's stdout")?;
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        stdout.read_to_string(&mut s).map(|_| s)
    });
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            if !status.success() {
                bail!("chromium exited with {status}");
            }
            break;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            bail!("chromium did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    reader
        .join()
        .map_err(|_| anyhow::anyhow!("reading chromium's output panicked"))?
        .context("reading chromium's output")
}
