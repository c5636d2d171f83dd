//! A TCP proxy in front of the test server, with two faults a network or a pooler can cause:
//! - open connections silenced: bytes stop flowing both ways while both sockets stay open, as
//!   when the server's host fails or the network path to it drops without a reset (until the
//!   client closes its socket, which the proxy sees); connections made after that pass as
//!   before;
//! - notifications dropped: the server's `NotificationResponse` messages never reach the
//!   client while everything else does, as with a pooler in transaction mode, which runs a
//!   `LISTEN` on a server connection it then hands to other clients.
//!
//! Its url asks for a connection without TLS, so that the proxy can read the server's
//! messages.

use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use sqlx::postgres::PgConnectOptions;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

/// The type of the server's message that carries a notification.
const NOTIFICATION_RESPONSE: u8 = b'A';

/// A proxy to the server of one database url; stops when dropped.
pub struct FaultProxy {
    url: String,
    faults: Arc<Faults>,
    accepting: JoinHandle<()>,
}

/// What the proxy does to its connections.
struct Faults {
    /// Connections numbered below this are silenced.
    silenced_below: watch::Sender<u64>,
    opened: AtomicU64,
    /// Connections the client closed, or the server.
    closed: AtomicU64,
    dropping_notifications: AtomicBool,
}

impl FaultProxy {
    /// A proxy on a free local port in front of the server `database_url` names, passing
    /// everything until told otherwise.
    pub async fn start(database_url: &str) -> Self {
        let options = PgConnectOptions::from_str(database_url).expect("a database url");
        let server = format!("{}:{}", options.get_host(), options.get_port());
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a free port");
        let local: SocketAddr = listener.local_addr().expect("the proxy's address");
        let url = database_url.replacen(&server, &local.to_string(), 1);
        assert_ne!(url, database_url, "the url names its server as {server}");
        let separator = if url.contains('?') { '&' } else { '?' };
        let faults = Arc::new(Faults {
            silenced_below: watch::channel(0).0,
            opened: AtomicU64::new(0),
            closed: AtomicU64::new(0),
            dropping_notifications: AtomicBool::new(false),
        });
        let accepting = tokio::spawn(accept(listener, server, Arc::clone(&faults)));
        FaultProxy {
            url: format!("{url}{separator}sslmode=disable"),
            faults,
            accepting,
        }
    }

    /// The database url, through the proxy.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Silences every connection open now, for good.
    pub fn silence_open_connections(&self) {
        let opened = self.faults.opened.load(Ordering::SeqCst);
        self.faults.silenced_below.send_replace(opened);
    }

    /// How many connections through the proxy are open: neither side closed them.
    pub fn open_connections(&self) -> u64 {
        self.faults.opened.load(Ordering::SeqCst) - self.faults.closed.load(Ordering::SeqCst)
    }

    /// Drops the server's notifications on every connection, open or new, from now on.
    pub fn drop_notifications(&self) {
        self.faults
            .dropping_notifications
            .store(true, Ordering::SeqCst);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // Ends every connection too: they live in the accepting task's set.
        self.accepting.abort();
    }
}

async fn accept(listener: TcpListener, server: String, faults: Arc<Faults>) {
    let mut connections = JoinSet::new();
    while let Ok((client, _)) = listener.accept().await {
        let number = faults.opened.fetch_add(1, Ordering::SeqCst);
        let faults = Arc::clone(&faults);
        let server = server.clone();
        connections.spawn(async move {
            relay(client, server, &faults, number).await;
            faults.closed.fetch_add(1, Ordering::SeqCst);
        });
    }
}

/// Relays one connection until either side closes, or, once connection `number` is
/// silenced, holds both sockets open in silence until the client closes its own.
async fn relay(client: TcpStream, server: String, faults: &Faults, number: u64) {
    let Ok(upstream) = TcpStream::connect(&server).await else {
        return;
    };
    let mut silenced = faults.silenced_below.subscribe();
    let silenced = async move {
        // The guard `wait_for` returns is dropped at once: it may not be held while waiting.
        let _ = silenced.wait_for(|below| number < *below).await.map(drop);
    };
    let (mut client_reads, mut client_writes) = client.into_split();
    let (server_reads, mut server_writes) = upstream.into_split();
    let went_silent = {
        let to_server = tokio::io::copy(&mut client_reads, &mut server_writes);
        let to_client = relay_messages(server_reads, &mut client_writes, faults);
        tokio::select! {
            _ = to_server => false,
            _ = to_client => false,
            () = silenced => true,
        }
    };
    if went_silent {
        // Whatever the client sends is lost; the server's socket stays open meanwhile.
        let mut dropped = vec![0; 64 * 1024];
        while client_reads
            .read(&mut dropped)
            .await
            .is_ok_and(|read| read > 0)
        {}
    }
}

/// Relays the server's messages to the client, whole, leaving out notifications while they
/// are dropped.
async fn relay_messages(
    mut server: OwnedReadHalf,
    client: &mut OwnedWriteHalf,
    faults: &Faults,
) -> std::io::Result<()> {
    let mut pending = Vec::new();
    let mut chunk = vec![0; 64 * 1024];
    loop {
        let read = server.read(&mut chunk).await?;
        if read == 0 {
            return Ok(());
        }
        pending.extend_from_slice(&chunk[..read]);
        let mut passed = Vec::with_capacity(pending.len());
        let mut start = 0;
        // Each message: its type, then its length (counting itself but not the type).
        while let Some(header) = pending.get(start..start + 5) {
            let length = u32::from_be_bytes(header[1..5].try_into().unwrap()) as usize;
            let end = start + 1 + length;
            if end > pending.len() {
                break;
            }
            let dropped = header[0] == NOTIFICATION_RESPONSE
                && faults.dropping_notifications.load(Ordering::SeqCst);
            if !dropped {
                passed.extend_from_slice(&pending[start..end]);
            }
            start = end;
        }
        pending.drain(..start);
        client.write_all(&passed).await?;
    }
}
