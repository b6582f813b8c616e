//! The HTTP server loop: hyper with a header read timeout (so slow clients cannot hold
//! connections open by dribbling headers) and graceful shutdown (in-flight requests finish, up to
//! a deadline).

use std::future::Future;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tower::ServiceExt;

/// Serves `app` until `shutdown` completes, then lets open connections finish for at most
/// `drain_timeout`.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    header_read_timeout: Duration,
    shutdown: impl Future<Output = ()>,
    drain_timeout: Duration,
) {
    let mut builder = Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(header_read_timeout);
    builder.http2().timer(TokioTimer::new()).keep_alive_interval(Some(Duration::from_secs(30)));
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, _) = match accepted {
                    Ok(accepted) => accepted,
                    Err(err) => {
                        // Typically out of file descriptors: back off instead of spinning.
                        tracing::warn!(error = %err, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                // Responses of large tables span many segments: without this, the last one
                // waits for the client's delayed ACK (Nagle), 40 ms on Linux.
                if let Err(err) = stream.set_nodelay(true) {
                    tracing::debug!(error = %err, "could not set TCP_NODELAY");
                }
                let service = app.clone().map_request(|request: Request<Incoming>| request.map(Body::new));
                let connection = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service)).into_owned();
                let connection = graceful.watch(connection);
                tokio::spawn(async move {
                    if let Err(err) = connection.await {
                        tracing::debug!(error = %err, "connection ended with an error");
                    }
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(drain_timeout) => tracing::warn!("shutdown timeout reached; dropping remaining connections"),
    }
}
