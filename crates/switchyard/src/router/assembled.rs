//! A non-streamed chat sent upstream as a stream and put back together
//! ([`Route::stream_upstream`](crate::route::Route::stream_upstream)): the `first_byte` limit
//! until the first content, the `idle` limit between chunks, and a break anywhere before the
//! end a failure of the attempt, retried or failed over whole (the client has seen nothing).

use std::time::Duration;

use futures_util::StreamExt;
use tokio::time::Instant;

use crate::assembly::Assembly;
use crate::chat::{ChatChunk, ChatRequest, ChatResponse, StreamNotice};
use crate::provider::{Call, ChunkStream, Provider};
use crate::{ErrorKind, ProviderError};

/// Streams `request` from `provider` and puts the answer together.
pub(super) async fn assembled(
    provider: &dyn Provider,
    call: Call<'_>,
    request: &ChatRequest,
) -> Result<ChatResponse, ProviderError> {
    let (timeouts, ends) = (*call.timeouts, call.ends);
    let mut assembly = Assembly::default().expecting(request.choices_asked());
    // The first-byte wait covers the connection, the head and the first content.
    let first = async {
        let mut stream = provider.chat_stream(call, request).await?;
        loop {
            match stream.next().await {
                Some(item) => {
                    let chunk = item?;
                    let alive = chunk.has_content() || chunk.is_content_filtered() || chunk.finishes();
                    assembly.push(chunk);
                    if alive {
                        return Ok(Some(stream));
                    }
                }
                None => return Ok(None),
            }
        }
    };
    let limit = timeouts.first_byte.min(timeouts.total);
    // A target that said nothing is not asked again while another remains, as for a stream.
    let stream: Option<ChunkStream> = tokio::time::timeout(limit, first).await.map_err(|_| {
        ProviderError::silence(format!("no answer within the first_byte timeout of {limit:?}"))
    })??;
    if let Some(mut stream) = stream {
        read_to_end(&mut stream, &mut assembly, timeouts.idle, ends).await?;
    }
    if assembly.is_empty() {
        return Err(ProviderError::new(ErrorKind::MalformedResponse, "the stream ended without an answer"));
    }
    Ok(assembly.finish())
}

/// Reads the rest of `stream` into `assembly`, each chunk within `idle`; once every choice
/// finished, within [`AFTER_FINISH`](super::AFTER_FINISH) and the attempt's end (`ends`),
/// after which a stream that said nothing more, or broke, is whole without its terminator.
async fn read_to_end(
    stream: &mut ChunkStream,
    assembly: &mut Assembly,
    idle: Duration,
    ends: Option<Instant>,
) -> Result<(), ProviderError> {
    loop {
        let whole = assembly.is_whole();
        let limit = match (whole, ends) {
            // Up to the attempt's end exactly, which the attempt cuts at: ended whole, not cut.
            (true, Some(ends)) => {
                idle.min(super::AFTER_FINISH).min(ends.saturating_duration_since(Instant::now()))
            }
            (true, None) => idle.min(super::AFTER_FINISH),
            (false, _) => idle,
        };
        match tokio::time::timeout(limit, stream.next()).await {
            Ok(Some(Ok(chunk))) => assembly.push(chunk),
            Ok(None) => return Ok(()),
            Err(_) if whole => {
                assembly.push(ChatChunk::notice(StreamNotice::Unterminated));
                return Ok(());
            }
            // An empty answer that then broke is no answer to keep: it is asked again.
            Ok(Some(Err(error))) if whole && assembly.has_content() => {
                let notice = StreamNotice::BrokenAfterFinish(error.detail().to_owned());
                assembly.push(ChatChunk::notice(notice));
                return Ok(());
            }
            Ok(Some(Err(error))) => return Err(error),
            Err(_) => {
                let message = format!("no chunk within the idle timeout of {idle:?}");
                return Err(ProviderError::new(ErrorKind::Timeout, message));
            }
        }
    }
}
