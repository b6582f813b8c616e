//! The HTTP server loop: hyper with a header read timeout (so slow clients cannot hold
//! connections open by dribbling headers) and graceful shutdown (in-flight requests finish, up to
//! a deadline).

use std::future::Future;
use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
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
                let stream = ParseErrorBodies::new(stream);
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

/// hyper answers a request it cannot parse itself, before the app sees it, with an empty body:
/// 414 for a URI over 65,534 bytes, 431 for a head larger than its buffer, 400 for a malformed
/// request line or header. Every error answer of icegate carries an Iceberg error body, so this
/// connection wrapper replaces those answers (recognised by their empty body: the app's errors
/// always have one) with the same status and a body saying what to change. hyper closes the
/// connection after such an answer, so nothing follows the replacement.
struct ParseErrorBodies<S> {
    inner: S,
    /// A replacement being written, and how much of it was.
    pending: Option<(Vec<u8>, usize)>,
}

impl<S> ParseErrorBodies<S> {
    fn new(inner: S) -> Self {
        Self { inner, pending: None }
    }
}

/// The answer to send instead of `head`, when `head` is one of hyper's own empty error answers.
fn replacement_for(head: &[u8]) -> Option<Vec<u8>> {
    let (status, r#type, message) = if head.starts_with(b"HTTP/1.1 414 ") {
        (
            "414 URI Too Long",
            "BadRequestException",
            "the request's URI is longer than 65,534 bytes, more than any Iceberg request needs",
        )
    } else if head.starts_with(b"HTTP/1.1 431 ") {
        (
            "431 Request Header Fields Too Large",
            "RequestHeaderFieldsTooLargeException",
            "the request's line and headers are larger than the server accepts",
        )
    } else if head.starts_with(b"HTTP/1.1 400 ") {
        ("400 Bad Request", "BadRequestException", "the request's line or a header is malformed HTTP")
    } else {
        return None;
    };
    let end = head.windows(4).position(|w| w == b"\r\n\r\n")?;
    let lowered = head[..end].to_ascii_lowercase();
    if !lowered.windows(19).any(|w| w == b"\r\ncontent-length: 0") {
        return None;
    }
    let code = &status[..3];
    let body = format!(r#"{{"error":{{"message":"{message}","type":"{}","code":{code}}}}}"#, r#type);
    Some(
        format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

impl<S: AsyncWrite + Unpin> ParseErrorBodies<S> {
    /// Writes the pending replacement; `Ready(Ok(()))` once all of it is out.
    fn drive(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        while let Some((bytes, written)) = &mut self.pending {
            if *written == bytes.len() {
                self.pending = None;
                break;
            }
            match Pin::new(&mut self.inner).poll_write(cx, &bytes[*written..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => *written += n,
                Poll::Ready(Err(err)) => return Poll::Ready(Err(err)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Replaces a write of hyper's own error answer (`first` is its first buffer).
    fn replaced(&mut self, cx: &mut Context<'_>, first: &[u8], total: usize) -> Option<Poll<std::io::Result<usize>>> {
        if self.pending.is_none() {
            self.pending = Some((replacement_for(first)?, 0));
        }
        Some(self.drive(cx).map_ok(|()| total))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ParseErrorBodies<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ParseErrorBodies<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        if let Some(poll) = self.replaced(cx, buf, buf.len()) {
            return poll;
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let total = bufs.iter().map(|b| b.len()).sum();
        if let Some(first) = bufs.iter().find(|b| !b.is_empty())
            && let Some(poll) = self.replaced(cx, first, total)
        {
            return poll;
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.drive(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut self.inner).poll_flush(cx),
            other => other,
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.drive(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut self.inner).poll_shutdown(cx),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::replacement_for;

    #[test]
    fn hyper_s_empty_error_answers_get_an_iceberg_body() {
        let head = b"HTTP/1.1 414 URI Too Long\r\ncontent-length: 0\r\ndate: Sat, 05 Dec 2026 07:00:00 GMT\r\n\r\n";
        let answer = String::from_utf8(replacement_for(head).expect("replaced")).unwrap();
        assert!(answer.starts_with("HTTP/1.1 414 URI Too Long\r\n"), "{answer}");
        let body = answer.split("\r\n\r\n").nth(1).unwrap();
        let parsed: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(parsed["error"]["code"], 414);
        assert!(answer.contains(&format!("content-length: {}\r\n", body.len())));
    }

    #[test]
    fn the_app_s_answers_pass_unchanged() {
        // The app's errors carry a body; its successes are never touched.
        assert!(replacement_for(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 87\r\n\r\n{}").is_none());
        assert!(replacement_for(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").is_none());
        assert!(replacement_for(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n").is_none());
    }
}
