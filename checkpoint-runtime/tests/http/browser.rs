//! The page in a real browser: headless Chromium (Debian's `chromium`;
//! `$CHROMIUM` names another) logs in, shows the run list, opens a waiting
//! run and sends its signal through the form; the run completes. Screenshots
//! go under the target directory (`CARGO_TARGET_TMPDIR/http-page/`).
//!
//! It never passes without having run: without a Chromium when the tests
//! are built it is ignored (`build.rs`: `cfg(checkpoint_test_chromium)`), and
//! under `CI=true` it runs and fails, saying so, when Chromium is missing.
//! `.ci/run` installs Chromium when it is missing.

use std::path::PathBuf;
use std::time::Duration;

use checkpoint_runtime::prelude::*;

use super::cdp::{find_chromium, Browser};
use super::{Fixture, TOKEN};

const WAIT: Duration = Duration::from_secs(20);

/// Checks that `png` is a PNG of some substance and saves it as `name`
/// under the target directory; its path.
fn save_png(png: &[u8], name: &str) -> PathBuf {
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n"),
        "the screenshot is not a PNG"
    );
    assert!(
        png.len() > 10_000,
        "the screenshot is nearly empty ({} bytes)",
        png.len()
    );
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("http-page");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, png).unwrap();
    println!("screenshot: {}", path.display());
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(checkpoint_test_chromium),
    ignore = "no Chromium when the tests were built: install Debian's `chromium` or set CHROMIUM"
)]
async fn the_page_lists_runs_and_sends_a_signal_in_chromium() {
    let Some(chromium) = find_chromium() else {
        panic!(
            "Chromium not found: install Debian's `chromium` package (`apt-get install -y \
             chromium`; .ci/run does it when it is missing) or set CHROMIUM to a Chromium binary. \
             This test drives the web page in a real browser and never passes without one{}",
            if std::env::var("CI").as_deref() == Ok("true") {
                " (CI=true: it must run here)"
            } else {
                ""
            }
        );
    };
    let f = Fixture::new().await;
    let mut browser = Browser::launch(&chromium, 1280, 900).await;

    // A token in the address is not taken (it would stay in the browser's
    // history), and it is taken out of the address.
    browser.navigate(&f.url(&format!("/#token={TOKEN}"))).await;
    browser
        .wait_for(
            "document.querySelector('#login-form')",
            "the login form for a `#token=` link",
            WAIT,
        )
        .await;
    let address = browser.eval("location.href").await;
    assert!(
        !address.as_str().unwrap().contains(TOKEN),
        "the token stays in the address: {address}"
    );

    // Log in with the token, as a person would: the login form.
    browser.navigate(&f.url("/")).await;
    browser
        .wait_for(
            "document.querySelector('#login-form')",
            "the login form",
            WAIT,
        )
        .await;
    browser.type_into("#token", TOKEN).await;
    browser.click("#login").await;

    // The run list shows the runs.
    browser
        .wait_for(
            "document.querySelector('#runs tbody tr[data-run=\"vendor-42\"]')",
            "the run `vendor-42` in the list",
            WAIT,
        )
        .await;
    let rows = browser
        .eval("[...document.querySelectorAll('#runs tbody tr')].map(r => r.dataset.run)")
        .await;
    assert_eq!(
        rows,
        serde_json::json!(["broken-1", "vendor-43", "vendor-42", "tally-1"]),
        "newest first"
    );
    let row = browser
        .eval("document.querySelector('#runs tbody tr[data-run=\"vendor-42\"]').innerText")
        .await;
    let row = row.as_str().unwrap();
    assert!(
        row.contains("onboarding") && row.contains("waiting"),
        "{row}"
    );
    let token_in_url = browser.eval("location.href").await;
    assert!(
        !token_in_url.as_str().unwrap().contains(TOKEN),
        "the token is in the address: {token_in_url}"
    );
    // Times to the millisecond; how long each run took or has been going.
    let started = browser
        .eval("document.querySelector('#runs tbody tr[data-run=\"tally-1\"] td:nth-child(5)').innerText")
        .await;
    let started = started.as_str().unwrap();
    let ms = started
        .strip_suffix(" UTC")
        .and_then(|t| t.rsplit_once('.'))
        .map(|(_, frac)| frac.len() == 3 && frac.bytes().all(|b| b.is_ascii_digit()));
    assert_eq!(ms, Some(true), "not a time to the millisecond: {started}");
    let took = browser
        .eval(
            "document.querySelector('#runs tbody tr[data-run=\"tally-1\"] td.duration').innerText",
        )
        .await;
    assert!(
        took.as_str().unwrap().ends_with(" ms") || took.as_str().unwrap().ends_with(" s"),
        "{took}"
    );
    // Counts per status, each a link to those runs.
    browser
        .wait_for(
            "document.querySelector('#counts a[data-status=\"waiting\"]')",
            "the counts per status",
            WAIT,
        )
        .await;
    let counts = browser
        .eval("[...document.querySelectorAll('#counts a')].map(a => a.dataset.status + ' ' + a.querySelector('strong').textContent)")
        .await;
    assert_eq!(
        counts,
        serde_json::json!(["all 4", "waiting 2", "completed 1", "failed 1"])
    );
    save_png(&browser.screenshot(false).await, "run-list.png");

    // The status filter narrows the list.
    browser
        .eval("document.querySelector('#f-status').value = 'failed'")
        .await;
    browser.click("#filters button[type=submit]").await;
    browser
        .wait_for(
            "document.querySelectorAll('#runs tbody tr').length === 1 && \
             document.querySelector('#runs tbody tr[data-run=\"broken-1\"]')",
            "only `broken-1` under status=failed",
            WAIT,
        )
        .await;
    browser.click("#filters button.quiet").await;
    browser
        .wait_for(
            "document.querySelectorAll('#runs tbody tr').length === 4",
            "every run again",
            WAIT,
        )
        .await;

    // The other waiting run's page updates by itself: a signal stored for it
    // (under a name no wait site has, forced) shows as pending, no click.
    browser
        .click("#runs tbody tr[data-run=\"vendor-43\"] a.run-link")
        .await;
    browser
        .wait_for(
            "document.querySelector('#signal-form')",
            "the run page of `vendor-43`",
            WAIT,
        )
        .await;
    assert!(browser
        .eval("document.querySelector('#pending')")
        .await
        .is_null());
    f.post(
        "/api/runs/vendor-43/signals/reminder?force=true",
        Some(r#"{"note": "call the bank"}"#),
        200,
    )
    .await;
    browser
        .wait_for(
            "document.querySelector('#pending li[data-signal=\"reminder\"]')",
            "the pending signal `reminder` on the live page",
            WAIT,
        )
        .await;
    // Navigating scrolls to the top.
    browser.eval("window.scrollTo(0, 10000)").await;
    browser.click("#back").await;
    browser
        .wait_for(
            "document.querySelector('#runs tbody tr[data-run=\"vendor-42\"]') && window.scrollY === 0",
            "the run list, scrolled to the top",
            WAIT,
        )
        .await;

    // Open the waiting run: its status, the form with the payload hint, the
    // timeline with what changed, the history.
    browser
        .click("#runs tbody tr[data-run=\"vendor-42\"] a.run-link")
        .await;
    browser
        .wait_for(
            "document.querySelector('#signal-form') && \
             document.querySelectorAll('details.version .fields').length >= 3",
            "the run page of `vendor-42` with its timeline",
            WAIT,
        )
        .await;
    let hint = browser
        .eval("document.querySelector('#payload-hint').innerText")
        .await;
    assert!(
        hint.as_str()
            .unwrap()
            .contains("struct Approval { approved: bool, by: String }"),
        "{hint}"
    );
    let changed = browser
        .eval(
            "[...document.querySelectorAll('details.version[data-seq=\"2\"] [data-diff]')]\
             .map(e => e.innerText)",
        )
        .await;
    assert!(
        changed.to_string().contains("acme: bank details"),
        "version 2 shows what was appended to `done`: {changed}"
    );
    // A field version 3 no longer saves is said so, not "removed".
    let gone = browser
        .eval("document.querySelector('details.version[data-seq=\"3\"] [data-diff=\"vendor\"]').textContent")
        .await;
    assert!(gone.as_str().unwrap().contains("no longer saved"), "{gone}");
    let events = browser
        .eval("[...document.querySelectorAll('#history tbody tr')].map(r => r.dataset.event)")
        .await;
    assert!(events.to_string().contains("suspended"), "{events}");
    browser.resize(1280, 2200).await;
    save_png(&browser.screenshot(true).await, "run-page-waiting.png");
    browser.resize(1280, 900).await;

    // The form starts empty, the example only a placeholder: no decision is
    // one click away. Sending it empty is refused on the page.
    let before = f.snapshot().await;
    let form = browser
        .eval("[document.querySelector('#signal-payload').value, document.querySelector('#signal-payload').placeholder]")
        .await;
    assert_eq!(form[0], "", "the payload is prefilled: {form}");
    assert!(form[1].as_str().unwrap().contains("approved"), "{form}");
    browser.click("#signal-send").await;
    browser
        .wait_for(
            "document.querySelector('#signal-result').innerText.startsWith('Type the payload first')",
            "the form's complaint about an empty payload",
            WAIT,
        )
        .await;
    // A payload that is not JSON is refused on the page, and nothing is sent.
    browser.type_into("#signal-payload", "{approved: yes").await;
    browser.click("#signal-send").await;
    browser
        .wait_for(
            "document.querySelector('#signal-result').innerText.startsWith('Not JSON')",
            "the form's complaint about bad JSON",
            WAIT,
        )
        .await;
    // JSON of the wrong shape is sent and refused by the server (422).
    browser
        .type_into("#signal-payload", r#"{"approved": "yes", "by": 7}"#)
        .await;
    browser.click("#signal-send").await;
    browser
        .wait_for(
            "document.querySelector('#signal-result').innerText.includes('signal_payload, HTTP 422')",
            "the server's refusal of a payload that is not an Approval",
            WAIT,
        )
        .await;
    assert_eq!(
        f.snapshot().await,
        before,
        "a refused signal changed the store"
    );

    // Fill the form and send the signal: the run completes.
    browser
        .type_into("#signal-payload", r#"{"approved": true, "by": "browser"}"#)
        .await;
    browser.click("#signal-send").await;
    browser
        .wait_for(
            "document.querySelector('#flash').innerText.includes('Signal `finance_approval` stored')",
            "the confirmation that the signal was stored",
            WAIT,
        )
        .await;
    f.until_status("vendor-42", Status::Completed).await;
    let out = f
        .worker
        .handle(super::onboarding, "vendor-42")
        .result()
        .await
        .unwrap();
    assert_eq!(out.last().unwrap(), "approved=true by browser");
    // The page follows the run to its end.
    browser
        .wait_for(
            "document.querySelector('#run-status').innerText === 'completed' && \
             document.querySelector('pre.output')",
            "the run page showing `completed` and the output",
            WAIT,
        )
        .await;
    browser.resize(1280, 2200).await;
    save_png(&browser.screenshot(true).await, "run-page-completed.png");

    // A run joining its children: its page says how many and in which
    // states (two waiting for their approval).
    f.worker
        .start(super::vendor_batch, "batch-1", 2)
        .await
        .unwrap();
    f.worker.run_until_idle().await.unwrap();
    browser.navigate(&f.url("/#/runs/batch-1")).await;
    browser
        .wait_for(
            "document.body.innerText.includes('waiting for 2 children (2 waiting)')",
            "the parent's page naming its two waiting children",
            WAIT,
        )
        .await;
    assert!(
        browser.exceptions.is_empty(),
        "the page threw: {:?}",
        browser.exceptions
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(checkpoint_test_chromium),
    ignore = "no Chromium when the tests were built: install Debian's `chromium` or set CHROMIUM"
)]
async fn the_page_shows_a_runs_progress_and_its_stream_live_in_chromium() {
    let Some(chromium) = find_chromium() else {
        panic!("Chromium not found: install Debian's `chromium` package or set CHROMIUM");
    };
    let worker = Runtime::in_memory();
    worker.start(super::narrate, "story-1", 3).await.unwrap();
    worker.run_until_idle().await.unwrap();
    let client = Runtime::builder()
        .worker_id("http")
        .store(worker.store())
        .client_only()
        .in_memory();
    let token = checkpoint_runtime::http::Token::new(TOKEN).unwrap();
    let f = Fixture::serve(worker, checkpoint_runtime::http::router(client, token)).await;
    let mut browser = Browser::launch(&chromium, 1280, 900).await;
    browser.navigate(&f.url("/")).await;
    browser
        .wait_for(
            "document.querySelector('#login-form')",
            "the login form",
            WAIT,
        )
        .await;
    browser.type_into("#token", TOKEN).await;
    browser.click("#login").await;
    browser
        .wait_for(
            "document.querySelector('#runs tbody tr[data-run=\"story-1\"]')",
            "the run in the list",
            WAIT,
        )
        .await;
    browser.navigate(&f.url("/#/runs/story-1")).await;
    // Waiting: its three items and its progress.
    browser
        .wait_for(
            "document.querySelectorAll('#stream-items li').length === 3",
            "the stream's three items",
            WAIT,
        )
        .await;
    let items = browser
        .eval("[...document.querySelectorAll('#stream-items li')].map(li => li.dataset.index + ' ' + li.querySelector('span').textContent)")
        .await;
    assert_eq!(
        items,
        serde_json::json!(["0 {\"line\":0}", "1 {\"line\":1}", "2 {\"line\":2}"])
    );
    let note = browser
        .eval("document.querySelector('#stream-note').textContent")
        .await;
    assert!(note.as_str().unwrap().contains("live"), "{note}");
    let progress = browser
        .eval("document.querySelector('#progress pre').textContent")
        .await;
    let progress: serde_json::Value = serde_json::from_str(progress.as_str().unwrap()).unwrap();
    assert_eq!(progress, serde_json::json!({ "done": 3, "total": 3 }));
    save_png(&browser.screenshot(true).await, "stream.png");
    // The run ends: the page says so.
    f.worker.signal("story-1", "close", &()).await.unwrap();
    browser
        .wait_for(
            "(document.querySelector('#stream-note') || {}).textContent?.includes('ended')",
            "the end of the stream",
            WAIT,
        )
        .await;
}
