//! The web viewer end to end in a real headless Chromium: the page `apiproxy serve --demo` serves,
//! driven through chromedriver (the `webdriver` crate), checked against the DOM and ARIA contract of issue
//! #23 (`crates/apiproxy/web/`): the list, a session, its subagent tree and diagnostics, a child's
//! history, deep links, live appends, reconnects without gaps or duplicates, owner isolation and
//! tokens, on JSONL, SQLite and PostgreSQL stores; accessibility goldens; screenshots of each
//! screen under `target/viewer-screens/`.
//!
//! Needs `/usr/bin/chromium` and `/usr/bin/chromedriver`: without them a test says it was skipped,
//! and fails under CI (`.ci/run` installs them). The PostgreSQL scenario needs `SESSION_PG_URL`
//! likewise.

mod harness;
mod scenarios;
