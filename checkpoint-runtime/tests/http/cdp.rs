//! Just enough of the Chrome DevTools Protocol to drive headless Chromium
//! like a person: open a page, read the DOM, type, click, take screenshots.
//! One WebSocket to the browser, one page target in flat session mode.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The Chromium to drive: `$CHROMIUM`, else `chromium` (Debian's package)
/// or `chromium-browser` on the `PATH`.
pub fn find_chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CHROMIUM").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    for dir in std::env::split_paths(&path) {
        for name in ["chromium", "chromium-browser"] {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return Some(candidate);
            }
        }
    }
    None
}

/// A headless Chromium with one page open; killed when dropped.
pub struct Browser {
    child: Child,
    socket: Socket,
    session: String,
    next_id: u64,
    profile: tempfile::TempDir,
    /// The page's uncaught exceptions (`Runtime.exceptionThrown`), as seen
    /// while waiting for answers.
    pub exceptions: Vec<Value>,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Browser {
    /// Starts `chromium` headless with a fresh profile, `width` x `height`.
    pub async fn launch(chromium: &Path, width: u32, height: u32) -> Browser {
        let profile = tempfile::tempdir().expect("a profile directory");
        let log = std::fs::File::create(profile.path().join("chromium.log")).expect("a log file");
        let child = Command::new(chromium)
            .args([
                "--headless",
                "--no-sandbox", // tests run as root in CI
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--disable-background-networking",
                "--remote-debugging-port=0",
                "--hide-scrollbars",
                "--force-device-scale-factor=1",
            ])
            .arg(format!("--window-size={width},{height}"))
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", chromium.display()));
        let mut browser_child = Some(child);
        // Chromium writes its DevTools port and path to this file once it
        // listens.
        let port_file = profile.path().join("DevToolsActivePort");
        let deadline = Instant::now() + Duration::from_secs(60);
        let url = loop {
            if let Ok(text) = std::fs::read_to_string(&port_file) {
                let mut lines = text.lines();
                if let (Some(port), Some(path)) = (lines.next(), lines.next()) {
                    break format!("ws://127.0.0.1:{port}{path}");
                }
            }
            let child = browser_child.as_mut().unwrap();
            if let Ok(Some(status)) = child.try_wait() {
                let log = std::fs::read_to_string(profile.path().join("chromium.log"))
                    .unwrap_or_default();
                panic!("Chromium exited ({status}) before it listened:\n{log}");
            }
            if Instant::now() > deadline {
                panic!("Chromium did not open its DevTools port within 60 s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let (socket, _) = tokio_tungstenite::connect_async(url.as_str())
            .await
            .unwrap_or_else(|e| panic!("cannot connect to Chromium's DevTools at {url}: {e}"));
        let mut browser = Browser {
            child: browser_child.take().unwrap(),
            socket,
            session: String::new(),
            next_id: 0,
            profile,
            exceptions: Vec::new(),
        };
        let target = browser
            .browser_call("Target.createTarget", json!({"url": "about:blank"}))
            .await;
        let target_id = target["targetId"].as_str().expect("a target id").to_owned();
        let attached = browser
            .browser_call(
                "Target.attachToTarget",
                json!({"targetId": target_id, "flatten": true}),
            )
            .await;
        browser.session = attached["sessionId"]
            .as_str()
            .expect("a session id")
            .to_owned();
        browser.call("Page.enable", json!({})).await;
        browser.call("Runtime.enable", json!({})).await;
        browser.resize(width, height).await;
        browser
    }

    async fn send(&mut self, session: Option<String>, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            message["sessionId"] = json!(s);
        }
        self.socket
            .send(Message::Text(message.to_string().into()))
            .await
            .unwrap_or_else(|e| panic!("cannot send {method}: {e}"));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let next = tokio::time::timeout(left, self.socket.next())
                .await
                .unwrap_or_else(|_| panic!("no answer to {method} within 30 s"));
            let Some(Ok(Message::Text(text))) = next else {
                match next {
                    Some(Ok(_)) => continue,
                    other => panic!("the DevTools socket closed during {method}: {other:?}"),
                }
            };
            let answer: Value = serde_json::from_str(&text).expect("DevTools sends JSON");
            if answer["method"] == "Runtime.exceptionThrown" {
                self.exceptions.push(answer["params"].clone());
            }
            if answer["id"] != json!(id) {
                continue; // an event, or another session's answer
            }
            if let Some(error) = answer.get("error") {
                panic!("{method} failed: {error}");
            }
            return answer["result"].clone();
        }
    }

    async fn browser_call(&mut self, method: &str, params: Value) -> Value {
        self.send(None, method, params).await
    }

    /// Chromium's own output, for a failure message.
    fn log(&self) -> String {
        std::fs::read_to_string(self.profile.path().join("chromium.log")).unwrap_or_default()
    }

    /// A command to the page.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        let session = self.session.clone();
        self.send(Some(session), method, params).await
    }

    /// Sets the viewport.
    pub async fn resize(&mut self, width: u32, height: u32) {
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}),
        )
        .await;
    }

    /// Opens `url` in the page.
    pub async fn navigate(&mut self, url: &str) {
        let r = self.call("Page.navigate", json!({"url": url})).await;
        if let Some(e) = r.get("errorText") {
            panic!("cannot open {url}: {e}");
        }
    }

    /// Evaluates `expression` in the page (awaiting a promise) and returns
    /// its value as JSON.
    pub async fn eval(&mut self, expression: &str) -> Value {
        let r = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
            )
            .await;
        if let Some(e) = r.get("exceptionDetails") {
            panic!("`{expression}` threw: {e}");
        }
        r["result"]["value"].clone()
    }

    /// Waits until `condition` (a JS expression) is truthy; panics after
    /// `timeout` with `what` and the page's text.
    pub async fn wait_for(&mut self, condition: &str, what: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let v = self.eval(&format!("Boolean({condition})")).await;
            if v == json!(true) {
                return;
            }
            if Instant::now() > deadline {
                let text = self
                    .eval("document.body ? document.body.innerText : ''")
                    .await;
                panic!(
                    "the page did not show {what} within {timeout:?}; it shows:\n{}\n\
                     exceptions: {:?}\nChromium's log:\n{}",
                    text.as_str().unwrap_or_default(),
                    self.exceptions,
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The centre of the element `selector` names, scrolled into view.
    async fn centre(&mut self, selector: &str) -> (f64, f64) {
        let sel = serde_json::to_string(selector).unwrap();
        let r = self
            .eval(&format!(
                "(() => {{ const e = document.querySelector({sel}); if (!e) return null; \
                 e.scrollIntoView({{block: 'center'}}); const r = e.getBoundingClientRect(); \
                 return [r.left + r.width / 2, r.top + r.height / 2]; }})()"
            ))
            .await;
        let (Some(x), Some(y)) = (r[0].as_f64(), r[1].as_f64()) else {
            panic!("no element `{selector}` to click");
        };
        (x, y)
    }

    /// Clicks the element `selector` names with the mouse, as a person would.
    pub async fn click(&mut self, selector: &str) {
        let (x, y) = self.centre(selector).await;
        for kind in ["mouseMoved", "mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}),
            )
            .await;
        }
    }

    /// Replaces the text of the input or textarea `selector` names by typing
    /// `text` into it.
    pub async fn type_into(&mut self, selector: &str, text: &str) {
        self.click(selector).await;
        let sel = serde_json::to_string(selector).unwrap();
        self.eval(&format!(
            "(() => {{ const e = document.querySelector({sel}); e.focus(); e.select(); }})()"
        ))
        .await;
        self.call("Input.insertText", json!({"text": text})).await;
    }

    /// A PNG of the page: the viewport, or the whole document when `full`.
    pub async fn screenshot(&mut self, full: bool) -> Vec<u8> {
        let mut params = json!({"format": "png"});
        if full {
            let m = self.call("Page.getLayoutMetrics", json!({})).await;
            let size = &m["cssContentSize"];
            let w = size["width"].as_f64().unwrap_or(1280.0);
            let h = size["height"].as_f64().unwrap_or(1000.0).min(6000.0);
            params["clip"] = json!({"x": 0, "y": 0, "width": w, "height": h, "scale": 1});
            params["captureBeyondViewport"] = json!(true);
        }
        let shot = self.call("Page.captureScreenshot", params).await;
        base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().expect("screenshot data"))
            .expect("base64 PNG")
    }
}
