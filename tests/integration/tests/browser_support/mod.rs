//! Headless Chromium driven through chromedriver (WebDriver, with fantoccini), for the tests
//! that use a page as a person would: the inbox (`serve.rs`), a UI on LangGraph's SDK
//! (`langgraph_ui.rs`). Without Chromium or chromedriver on `PATH`, [`Browser::start`] says that
//! the test skipped.
#![allow(dead_code)]

use reqwest::Client;
use serde_json::json;

/// chromedriver's process, killed when dropped: at the end of the test, and also when it fails.
pub struct Driver(std::process::Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A WebDriver session (fantoccini) with chromedriver driving a headless Chromium.
pub struct Browser {
    /// The WebDriver session.
    pub client: fantoccini::Client,
    /// Where screenshots go: `target/FOLDER` of the workspace.
    shots: std::path::PathBuf,
    _driver: Driver,
}

/// How long the browser waits for an element or a text to appear.
pub const PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);
/// How often it looks.
pub const POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// The first of `names` found in a folder of `PATH`.
pub fn on_path(names: &[&str]) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).flat_map(|dir| names.iter().map(move |n| dir.join(n))).find(|p| p.is_file())
}

impl Browser {
    /// Starts chromedriver and a headless Chromium, or says why it cannot (`None`); screenshots
    /// go to `target/SHOTS` of the workspace.
    pub async fn start(shots: &str) -> Option<Browser> {
        let Some(driver) = on_path(&["chromedriver"]) else {
            eprintln!("skipped: no chromedriver on PATH (Debian: apt-get install -y chromium chromium-driver)");
            return None;
        };
        let Some(chromium) = on_path(&["chromium", "chromium-browser", "google-chrome"]) else {
            eprintln!("skipped: no Chromium on PATH (Debian: apt-get install -y chromium chromium-driver)");
            return None;
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let driver = Driver(
            std::process::Command::new(driver)
                .arg(format!("--port={port}"))
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        );
        let http = Client::new();
        let base = format!("http://127.0.0.1:{port}");
        for _ in 0..100 {
            if http.get(format!("{base}/status")).send().await.is_ok() {
                break;
            }
            tokio::time::sleep(POLL).await;
        }
        let mut capabilities = serde_json::Map::new();
        capabilities.insert("browserName".into(), json!("chrome"));
        capabilities.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1000"],
            }),
        );
        // chromedriver is on loopback and speaks plain HTTP: no TLS connector.
        let client = fantoccini::ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(capabilities)
            .connect(&base)
            .await
            .unwrap_or_else(|e| panic!("no WebDriver session with chromedriver at {base}: {e}"));
        let shots = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target").join(shots);
        Some(Browser { client, shots, _driver: driver })
    }

    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.unwrap_or_else(|e| panic!("cannot open {url}: {e}"));
    }

    /// The element `css` selects, waiting up to 10 s for it.
    pub async fn find(&self, css: &str) -> fantoccini::elements::Element {
        match self.client.wait().at_most(PATIENCE).every(POLL).for_element(fantoccini::Locator::Css(css)).await {
            Ok(element) => element,
            Err(e) => {
                let source = self.client.source().await.unwrap_or_default();
                panic!("no element `{css}` ({e}) on the page:\n{source}");
            }
        }
    }

    pub async fn click(&self, css: &str) {
        self.find(css).await.click().await.unwrap_or_else(|e| panic!("cannot click `{css}`: {e}"));
    }

    pub async fn type_into(&self, css: &str, text: &str) {
        self.find(css).await.send_keys(text).await.unwrap_or_else(|e| panic!("cannot type into `{css}`: {e}"));
    }

    /// The text of `css`. The inbox re-renders as the thread moves on: an element found just
    /// before a re-render is stale, and is found again.
    pub async fn text(&self, css: &str) -> String {
        let mut tries = PATIENCE.as_millis() / POLL.as_millis();
        loop {
            match self.find(css).await.text().await {
                Ok(text) => return text,
                Err(e) if tries > 0 && e.to_string().contains("stale element") => {
                    tries -= 1;
                    tokio::time::sleep(POLL).await;
                }
                Err(e) => panic!("no text of `{css}`: {e}"),
            }
        }
    }

    /// Waits until `css`'s text is `want`.
    pub async fn wait_text(&self, css: &str, want: &str) {
        let mut last = String::new();
        for _ in 0..PATIENCE.as_millis() / POLL.as_millis() {
            last = self.text(css).await;
            if last == want {
                return;
            }
            tokio::time::sleep(POLL).await;
        }
        panic!("`{css}` says {last:?}, not {want:?}");
    }

    /// Waits until `css`'s text contains `want`.
    pub async fn wait_contains(&self, css: &str, want: &str) {
        let mut last = String::new();
        for _ in 0..PATIENCE.as_millis() / POLL.as_millis() {
            last = self.text(css).await;
            if last.contains(want) {
                return;
            }
            tokio::time::sleep(POLL).await;
        }
        panic!("`{css}` says {last:?}, without {want:?}");
    }

    /// Saves a screenshot as `target/SHOTS/NAME.png` (the workspace's `target`).
    pub async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.unwrap_or_else(|e| panic!("no screenshot {name}: {e}"));
        std::fs::create_dir_all(&self.shots).unwrap();
        std::fs::write(self.shots.join(format!("{name}.png")), png).unwrap();
    }

    /// Ends the WebDriver session (Chromium quits); dropping `_driver` then kills chromedriver.
    pub async fn quit(self) {
        let _ = self.client.close().await;
    }
}
