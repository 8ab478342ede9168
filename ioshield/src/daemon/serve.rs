//! The accept loop both sockets (status, metrics) share. Idle clients must not be able to take
//! the daemon's file descriptors: without them /proc reads and journal writes fail, and the
//! daemon can neither decide nor undo. So at most [`MAX_CONNECTIONS`] are served at once (a
//! connection over the cap is closed at once, freeing its descriptor), each for at most
//! [`CONNECTION_TIMEOUT`], and an accept error (EMFILE included) never ends the loop.
use std::{future::Future, io, sync::Arc, time::Duration};

use tokio::{
    io::{AsyncRead, AsyncWrite},
    net::{TcpListener, TcpStream, UnixListener, UnixStream},
    sync::Semaphore,
};

pub const MAX_CONNECTIONS: usize = 64;
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(5);
/// How long to wait after an accept error before trying again: EMFILE and ENFILE stay until
/// something closes a descriptor, and retrying at once would spin.
const AFTER_ERROR: Duration = Duration::from_millis(100);

pub trait Listener: Send + 'static {
    type Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    fn accept(&self) -> impl Future<Output = io::Result<Self::Stream>> + Send;
}

impl Listener for TcpListener {
    type Stream = TcpStream;
    async fn accept(&self) -> io::Result<TcpStream> {
        TcpListener::accept(self).await.map(|(s, _)| s)
    }
}

impl Listener for UnixListener {
    type Stream = UnixStream;
    async fn accept(&self) -> io::Result<UnixStream> {
        UnixListener::accept(self).await.map(|(s, _)| s)
    }
}

/// Runs `handle` on every connection `listener` accepts, in the background, forever. `what`
/// names the socket in log lines.
pub fn spawn<L, F, Fut>(what: String, listener: L, handle: F)
where
    L: Listener,
    F: Fn(L::Stream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    tokio::spawn(async move {
        let mut last_logged: Option<tokio::time::Instant> = None;
        loop {
            let stream = match listener.accept().await {
                Ok(s) => s,
                Err(e) => {
                    // Once a minute is enough to say the daemon is short of descriptors.
                    if last_logged.is_none_or(|t| t.elapsed() > Duration::from_secs(60)) {
                        tracing::warn!("{what}: accepting a connection: {e}");
                        last_logged = Some(tokio::time::Instant::now());
                    }
                    tokio::time::sleep(AFTER_ERROR).await;
                    continue;
                }
            };
            let Ok(permit) = permits.clone().try_acquire_owned() else {
                continue;
            };
            let work = handle(stream);
            tokio::spawn(async move {
                let _ = tokio::time::timeout(CONNECTION_TIMEOUT, work).await;
                drop(permit);
            });
        }
    });
}
