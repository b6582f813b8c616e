//! Work that must finish even if the request that started it goes away (not to be confused
//! with the task queue of background jobs, `jobs`).

use std::future::Future;

/// Runs `future` on its own task, so that it finishes even if the request is cancelled (client
/// gone, request timeout). Used for work that must not stop half way, such as a commit between
/// writing its metadata file and swapping it in.
pub async fn run_to_completion<F>(future: F) -> crate::Result<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    tokio::spawn(future)
        .await
        .map_err(|e| crate::CatalogError::Internal(anyhow::anyhow!("background task failed: {e}")))
}
