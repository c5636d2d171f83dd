//! A TCP proxy in front of the test server whose open connections can be silenced: bytes stop
//! flowing both ways while both sockets stay open, as when the server's host fails or the
//! network path to it drops without a reset. Connections made after that pass as before.

use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use sqlx::postgres::PgConnectOptions;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

/// A proxy to the server of one database url; stops when dropped.
pub struct SilentProxy {
    url: String,
    /// Connections numbered below this are silenced.
    silenced_below: watch::Sender<u64>,
    opened: Arc<AtomicU64>,
    accepting: JoinHandle<()>,
}

impl SilentProxy {
    /// A proxy on a free local port in front of the server `database_url` names.
    pub async fn start(database_url: &str) -> Self {
        let options = PgConnectOptions::from_str(database_url).expect("a database url");
        let server = format!("{}:{}", options.get_host(), options.get_port());
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a free port");
        let local: SocketAddr = listener.local_addr().expect("the proxy's address");
        let url = database_url.replacen(&server, &local.to_string(), 1);
        assert_ne!(url, database_url, "the url names its server as {server}");
        let (silenced_below, silenced) = watch::channel(0);
        let opened = Arc::new(AtomicU64::new(0));
        let accepting = tokio::spawn(accept(listener, server, silenced, Arc::clone(&opened)));
        SilentProxy {
            url,
            silenced_below,
            opened,
            accepting,
        }
    }

    /// The database url, through the proxy.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Silences every connection open now, for good.
    pub fn silence_open_connections(&self) {
        self.silenced_below
            .send_replace(self.opened.load(Ordering::SeqCst));
    }
}

impl Drop for SilentProxy {
    fn drop(&mut self) {
        // Ends every connection too: they live in the accepting task's set.
        self.accepting.abort();
    }
}

async fn accept(
    listener: TcpListener,
    server: String,
    silenced: watch::Receiver<u64>,
    opened: Arc<AtomicU64>,
) {
    let mut connections = JoinSet::new();
    while let Ok((client, _)) = listener.accept().await {
        let number = opened.fetch_add(1, Ordering::SeqCst);
        connections.spawn(relay(client, server.clone(), silenced.clone(), number));
    }
}

/// Relays one connection until either side closes, or holds both sockets open in silence
/// once connection `number` is silenced.
async fn relay(
    mut client: TcpStream,
    server: String,
    mut silenced: watch::Receiver<u64>,
    number: u64,
) {
    let Ok(mut upstream) = TcpStream::connect(&server).await else {
        return;
    };
    let silenced = async move {
        // The guard `wait_for` returns is dropped at once: it may not be held while waiting.
        let _ = silenced.wait_for(|below| number < *below).await.map(drop);
    };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {}
        () = silenced => std::future::pending::<()>().await,
    }
}
