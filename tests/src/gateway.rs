//! The `apiproxy` binary as a child process, for the probes that measure the gateway itself.

use std::{
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
};

/// A running `apiproxy serve` over a store directory; killed and reaped when dropped.
#[derive(Debug)]
pub struct Gateway {
    child: Child,
    addr: String,
}

impl Gateway {
    /// Starts `apiproxy serve --listen 127.0.0.1:0 --store <store>` and waits for the line that
    /// says where it listens (the gateway prints it once it does).
    pub fn serve(apiproxy: &Path, store: &str) -> Gateway {
        Gateway::serve_with(apiproxy, store, &[])
    }

    /// [`Gateway::serve`] with more flags for `serve`.
    pub fn serve_with(apiproxy: &Path, store: &str, flags: &[&str]) -> Gateway {
        let mut child = Command::new(apiproxy)
            .args(["serve", "--listen", "127.0.0.1:0", "--store", store])
            .args(flags)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| panic!("start {}: {error}", apiproxy.display()));
        let stdout = child.stdout.take().expect("piped stdout");
        // Owned from here on, so a panic below still kills the child.
        let mut gateway = Gateway { child, addr: String::new() };
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).expect("the listening line");
        gateway.addr = line
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .to_owned();
        gateway
    }

    /// The `host:port` it listens on.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
