//! A non-streamed chat sent upstream as a stream and put back together
//! ([`Route::stream_upstream`](crate::route::Route::stream_upstream)): the `first_byte` limit
//! until the first content, the `idle` limit between chunks, and a break anywhere before the
//! end a failure of the attempt, retried or failed over whole (the client has seen nothing).

use futures_util::StreamExt;

use crate::assembly::{Assembly, read_to_end};
use crate::chat::{ChatRequest, ChatResponse};
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
