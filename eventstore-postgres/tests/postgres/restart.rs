//! Fencing tokens are ordinary durable rows: they survive a server crash and restart, and
//! the storage works again once the server is back. The server is a throwaway cluster this
//! test creates with `initdb` in a temporary directory; no shared server is restarted.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use eventstore_api::{
    AppendCriteria, Direction, EventFilter, EventStorage, EventStreamId, EventToStore,
    FencingToken, LeaseRequest, LeaseStatus, Limit,
};
use eventstore_postgres::PostgresEventStorage;
use serde_json::json;

use crate::common;

/// A PostgreSQL cluster of its own in a temporary directory, stopped when dropped.
struct ThrowawayCluster {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    /// PostgreSQL refuses to run as root: run its programs as the `postgres` user then.
    run_as_postgres: bool,
}

impl ThrowawayCluster {
    /// Creates and starts one, or says why it cannot (no PostgreSQL binaries here).
    fn start() -> Result<Self, String> {
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
        let cluster = ThrowawayCluster {
            bin,
            dir,
            port,
            run_as_postgres,
        };
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

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    fn pg_ctl_start(&self) -> Result<(), String> {
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
    fn crash(&self) -> Result<(), String> {
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

async fn request(storage: &PostgresEventStorage, owner: &str) -> (LeaseStatus, FencingToken) {
    let response = storage
        .request_lease(LeaseRequest::new(
            "orders",
            owner,
            0,
            Duration::from_secs(120),
        ))
        .await
        .expect("request_lease");
    (response.status, response.fencing_token)
}

#[tokio::test]
async fn fencing_tokens_and_events_survive_a_server_crash_and_restart() {
    let cluster = match ThrowawayCluster::start() {
        Ok(cluster) => cluster,
        Err(why) if common::required() => {
            panic!("a throwaway PostgreSQL cluster is required (CI=true): {why}")
        }
        Err(why) => {
            common::skip(&why);
            return;
        }
    };
    let storage = PostgresEventStorage::builder()
        .url(cluster.url())
        .prefix("restart_")
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(3))
        .build()
        .await
        .expect("a storage on the throwaway cluster");

    assert_eq!(
        request(&storage, "a").await,
        (LeaseStatus::Leader, FencingToken(1))
    );
    storage.release_lease("orders", "a").await.unwrap();
    assert_eq!(
        request(&storage, "b").await,
        (LeaseStatus::Leader, FencingToken(2))
    );
    storage.release_lease("orders", "b").await.unwrap();
    assert_eq!(
        request(&storage, "a").await,
        (LeaseStatus::Leader, FencingToken(3))
    );
    let stream = EventStreamId::for_context("orders");
    let before = storage
        .append(
            AppendCriteria::none(),
            &stream,
            vec![EventToStore::new("Placed", json!({"n": 1}))],
        )
        .await
        .unwrap();

    cluster.crash().expect("stopping the cluster");
    let down = storage
        .request_lease(LeaseRequest::new(
            "orders",
            "a",
            0,
            Duration::from_secs(120),
        ))
        .await;
    assert!(
        down.is_err(),
        "a request to a stopped server succeeded: {down:?}"
    );
    let down = down.unwrap_err().to_string();
    assert!(
        down.contains("request leases") || down.contains("connection"),
        "unclear error: {down}"
    );
    cluster.pg_ctl_start().expect("starting the cluster again");

    let renewed = common::eventually(
        "the storage to work again after the restart",
        Duration::from_secs(30),
        || async {
            storage
                .request_lease(LeaseRequest::new(
                    "orders",
                    "a",
                    0,
                    Duration::from_secs(120),
                ))
                .await
                .ok()
        },
    )
    .await;
    assert_eq!(
        (renewed.status, renewed.fencing_token),
        (LeaseStatus::Leader, FencingToken(3)),
        "the live lease and its token survive"
    );

    storage.release_lease("orders", "a").await.unwrap();
    assert_eq!(
        request(&storage, "b").await,
        (LeaseStatus::Leader, FencingToken(4)),
        "tokens never repeat"
    );
    let after = storage
        .query(
            &EventFilter::match_all(),
            &stream,
            None,
            Limit::none(),
            Direction::Forward,
        )
        .await
        .unwrap();
    assert_eq!(after, before);
    storage.close().await.unwrap();
}
