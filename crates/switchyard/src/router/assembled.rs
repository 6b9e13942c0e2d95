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
                    let alive = chunk.answers();
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
    // A stream that ended before any content or finish (a role, then its terminator) is no
    // answer, as for a streamed request: asked again, or of the next target.
    let Some(mut stream) = stream else {
        return Err(ProviderError::new(ErrorKind::MalformedResponse, "the stream ended without an answer"));
    };
    read_to_end(&mut stream, &mut assembly, timeouts.idle, ends).await?;
    Ok(assembly.finish())
}

/// Reads the rest of `stream` into `assembly`, a chunk that shows life within `idle` of the
/// last (keep-alives pass the time, not reset it); once every choice
/// finished, within [`AFTER_FINISH`](super::AFTER_FINISH) and the attempt's end (`ends`),
/// after which a stream that said nothing more, or broke, is whole without its terminator.
async fn read_to_end(
    stream: &mut ChunkStream,
    assembly: &mut Assembly,
    idle: Duration,
    ends: Option<Instant>,
) -> Result<(), ProviderError> {
    let mut alive_at = Instant::now();
    loop {
        let whole = assembly.is_whole();
        let due = match (whole, ends) {
            // Up to the attempt's end exactly, which the attempt cuts at: ended whole, not cut.
            (true, Some(ends)) => (Instant::now() + idle.min(super::AFTER_FINISH)).min(ends),
            (true, None) => Instant::now() + idle.min(super::AFTER_FINISH),
            (false, _) => alive_at + idle,
        };
        match tokio::time::timeout_at(due, stream.next()).await {
            Ok(Some(Ok(chunk))) => {
                if chunk.shows_life() {
                    alive_at = Instant::now();
                }
                assembly.push(chunk);
            }
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
