//! TODO(adapter): this module is being written.

use switchyard::chat::{ChatRequest, ChatResponse};
use switchyard::provider::{BoxFuture, Call, ChunkStream, Provider};
use switchyard::{ErrorKind, ProviderError};

use crate::{BuildError, ProviderSettings};

/// Placeholder until the adapter lands.
#[derive(Debug)]
pub struct OpenAiProvider {
    base_url: String,
}

impl OpenAiProvider {
    pub fn new(settings: &ProviderSettings) -> Result<Self, BuildError> {
        Ok(Self { base_url: settings.resolved_base_url()? })
    }
}

impl Provider for OpenAiProvider {
    fn kind(&self) -> &str {
        "openai"
    }

    fn base_url(&self) -> &str {
        &self.base_url
    }

    fn chat<'a>(
        &'a self,
        _: Call<'a>,
        _: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, ProviderError>> {
        Box::pin(async { Err(ProviderError::new(ErrorKind::InvalidRequest, "not implemented yet")) })
    }

    fn chat_stream<'a>(
        &'a self,
        _: Call<'a>,
        _: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChunkStream, ProviderError>> {
        Box::pin(async { Err(ProviderError::new(ErrorKind::InvalidRequest, "not implemented yet")) })
    }
}
