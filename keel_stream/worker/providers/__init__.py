"""Model providers: the fake one (default, scriptable) and an OpenAI-compatible one."""

from keel_stream.worker.providers.base import (
    Finish,
    Provider,
    ProviderEvent,
    ProviderFailed,
    ProviderRequest,
    TextDelta,
    ToolCall,
    ToolSpec,
)
from keel_stream.worker.providers.fake import FakeProvider
from keel_stream.worker.providers.openai import OpenAIProvider

__all__ = [
    "FakeProvider",
    "Finish",
    "OpenAIProvider",
    "Provider",
    "ProviderEvent",
    "ProviderFailed",
    "ProviderRequest",
    "TextDelta",
    "ToolCall",
    "ToolSpec",
]
