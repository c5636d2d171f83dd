//! A PostgreSQL cluster of a test's own, made with `initdb` in a temporary directory on a
//! spare port, for tests that crash and restart the server: no shared server is restarted.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common;

/// A PostgreSQL cluster of its own in a temporary directory, stopped when dropped.
pub(crate) struct ThrowawayCluster {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    /// PostgreSQL refuses to run as root: run its programs as the `postgres` user then.
    run_as_postgres: bool,
}

impl ThrowawayCluster {
    /// Creates and starts one, or says why it cannot (no PostgreSQL binaries here).
    fn start() -> Result<Self, String> {
        let cluster = ThrowawayCluster::empty()?;
        cluster.run(
            "initdb",
            &[
                "-D",
                &cluster.data(),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
            ],
        )?;
        cluster.pg_ctl_start()?;
        Ok(cluster)
    }

    /// A streaming replica of this cluster, made with `pg_basebackup`, started on a port of
    /// its own. Asynchronous unless the primary names it in `synchronous_standby_names`.
    pub(crate) fn start_replica(&self) -> Result<Self, String> {
        let replica = ThrowawayCluster::empty()?;
        let port = self.port.to_string();
        replica.run(
            "pg_basebackup",
            &[
                "-D",
                &replica.data(),
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-U",
                "postgres",
                "-X",
                "stream",
                "-R",
                "--no-sync",
            ],
        )?;
        replica.pg_ctl_start()?;
        Ok(replica)
    }

    /// Promotes this replica to a primary, waiting until it accepts writes.
    pub(crate) fn promote(&self) -> Result<(), String> {
        self.run("pg_ctl", &["-D", &self.data(), "-w", "-t", "60", "promote"])
    }

    /// A directory and a port, nothing in them yet.
    fn empty() -> Result<Self, String> {
        let bin = find_bin_dir().ok_or("no PostgreSQL server binaries (initdb, pg_ctl) found")?;
        let run_as_postgres = is_root();
        let dir = tempfile::Builder::new()
            .prefix("eventstore-pg-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        if run_as_postgres {
            let chown = Command::new("chown")
                .args(["-R", "postgres:"])
                .arg(dir.path())
                .status();
            if !chown.is_ok_and(|s| s.success()) {
                return Err("cannot hand the temporary directory to the postgres user".into());
            }
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?
            .port();
        Ok(ThrowawayCluster {
            bin,
            dir,
            port,
            run_as_postgres,
        })
    }

    /// A started cluster, or `None` after saying why there is none; under `CI=true` having
    /// none fails the test instead. On the pass through PgBouncer there is none: the cluster
    /// is reached directly, so the direct pass covers what it tests.
    pub(crate) fn start_or_skip() -> Option<Self> {
        if common::needs_direct_connection(
            "it runs on a throwaway cluster of its own, which the pooler does not front",
        ) {
            return None;
        }
        match ThrowawayCluster::start() {
            Ok(cluster) => Some(cluster),
            Err(why) if common::required() => {
                panic!("a throwaway PostgreSQL cluster is required (CI=true): {why}")
            }
            Err(why) => {
                common::skip(&why);
                None
            }
        }
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    /// The url of its `postgres` database.
    pub(crate) fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Starts the server (again), waiting until it accepts connections.
    pub(crate) fn pg_ctl_start(&self) -> Result<(), String> {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("server.log").display().to_string();
        self.run(
            "pg_ctl",
            &[
                "-D",
                &self.data(),
                "-l",
                &log,
                "-o",
                &options,
                "-w",
                "-t",
                "60",
                "start",
            ],
        )
    }

    /// Stops the server the way a crash would: no shutdown checkpoint, WAL replay on start.
    pub(crate) fn crash(&self) -> Result<(), String> {
        self.run(
            "pg_ctl",
            &["-D", &self.data(), "-m", "immediate", "-w", "stop"],
        )
    }

    fn run(&self, program: &str, args: &[&str]) -> Result<(), String> {
        let path = self.bin.join(program);
        let mut command = if self.run_as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&path);
            c
        } else {
            Command::new(&path)
        };
        let output = command
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .map_err(|e| format!("{program}: {e}"))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{program} failed: {}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ))
        }
    }
}

impl Drop for ThrowawayCluster {
    fn drop(&mut self) {
        let _ = self.run(
            "pg_ctl",
            &["-D", &self.data(), "-m", "immediate", "-w", "stop"],
        );
    }
}

fn find_bin_dir() -> Option<PathBuf> {
    let from_pg_config = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    let mut candidates: Vec<PathBuf> = from_pg_config.into_iter().collect();
    if let Ok(versions) = std::fs::read_dir("/usr/lib/postgresql") {
        let mut found: Vec<PathBuf> = versions.flatten().map(|v| v.path().join("bin")).collect();
        found.sort();
        candidates.extend(found.into_iter().rev());
    }
    candidates.into_iter().find(|dir| has_server_binaries(dir))
}

fn has_server_binaries(dir: &Path) -> bool {
    dir.join("initdb").is_file() && dir.join("pg_ctl").is_file()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}
