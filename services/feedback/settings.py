"""Feedback service settings (prefix `AGENTFEEDBACK_FEEDBACK_`), validated once at start-up."""
from __future__ import annotations

import re

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import SettingsConfigDict

from services.common.settings import LISTEN_PATTERN, TARGET_PATTERN, CommonSettings


class FeedbackSettings(CommonSettings):
    model_config = SettingsConfigDict(env_prefix="AGENTFEEDBACK_FEEDBACK_", extra="ignore")

    # Listen address of FeedbackService (docs/architecture.md "Processes": 50052).
    listen: str = Field(default="127.0.0.1:50052", pattern=LISTEN_PATTERN)
    # Prometheus metrics endpoint (`host:port`, port 0 = any free port; empty = none): GET /metrics.
    metrics_listen: str = Field(default="127.0.0.1:9462", pattern=r"^$|" + LISTEN_PATTERN)
    # ChatService address (snapshots are resolved there with the caller's token).
    chat_target: str = Field(default="127.0.0.1:50051", pattern=TARGET_PATTERN)
    # TraceQueryService address (the capture worker freezes the turn's spans from there).
    traces_target: str = Field(default="127.0.0.1:50053", pattern=TARGET_PATTERN)
    # Seconds a call to the chat service (a snapshot fetch, a rated turn's owner) may take before falling
    # back or answering CHAT_UNAVAILABLE; sent as the call's gRPC deadline, so chat's database waits end
    # 25 % of it earlier and a frozen database is still named (services/common/deadlines.py).
    chat_timeout_s: float = Field(default=2.0, gt=0)
    # Reports one owner may have stored (services/feedback/report_cap.py); a CreateFeedback beyond it is
    # RESOURCE_EXHAUSTED (QuotaFailure, no RetryInfo: delete reports first). 0: no cap.
    max_reports_per_owner: int = Field(default=10_000, ge=0)
    # Rating note limit in UTF-8 bytes (proto `Rating.note`: default 8192).
    rating_note_max_bytes: int = Field(default=8192, ge=1)
    # Seconds a positive ownership check of a rated conversation/turn at the chat service is reused for
    # the same caller (0 = ask the chat service on every PutRating).
    rating_check_cache_s: float = Field(default=5.0, ge=0)
    # Trace capture worker: seconds between two looks at its queue (it is also woken by every new report).
    capture_poll_s: float = Field(default=1.0, gt=0)
    # Looks at the collector before a turn whose spans never arrived is marked UNAVAILABLE.
    capture_max_attempts: int = Field(default=20, ge=1)
    # Seconds after the turn after which a trace whose spans stopped arriving (its process died) is
    # frozen with what is there, marked incomplete with what is missing (issue 16).
    capture_settle_s: float = Field(default=60.0, gt=0)
    # Seconds after the turn during which an incomplete copy is looked at again (completed if its
    # missing spans arrive).
    capture_complete_window_s: float = Field(default=3600.0, ge=0)
    # First retry delay in seconds; doubles per attempt, at most 60 s.
    capture_backoff_s: float = Field(default=1.0, gt=0)
    # Bearer token (scope `traces:read`) the capture worker presents to the collector. Empty: minted
    # from the HS256 secret as `svc:feedback` (embedded / dev deployments).
    service_token: SecretStr = SecretStr("")
    # Span retention of the collector in days (a turn older than this is EXPIRED, not UNAVAILABLE).
    trace_retention_days: int = Field(default=14, ge=1)
    # Ticket sink for FileFeedback: `markdown` (a local directory) or `github`.
    tracker: str = Field(default="markdown", pattern="^(markdown|github)$")
    # Directory of the markdown sink's tickets (`<id>.md`). Empty: `<data_dir>/tickets`.
    tracker_markdown_dir: str = ""
    # Seconds FileFeedback waits for a report's turn spans to be frozen (trace snapshot PENDING) before
    # it files the ticket anyway (marked pending): a ticket filed a second after the report still
    # carries the tool calls. 0 = never wait.
    filing_capture_wait_s: float = Field(default=10.0, ge=0)
    # GitHub sink: REST API base URL (GitHub Enterprise Server: https://HOST/api/v3).
    tracker_github_api: str = "https://api.github.com"
    # GitHub sink: `owner/name` of the repository the issues are opened in.
    tracker_github_repo: str = ""
    # GitHub sink: token allowed to create issues there (fine-grained: Issues read and write).
    tracker_github_token: SecretStr = SecretStr("")
    # Labels every filed ticket carries, comma-separated (each `[A-Za-z0-9 _.:-]`, at most 50 characters;
    # at most 10). They come from here only: no client-chosen value ever reaches a tracker (issue 13).
    tracker_labels: str = Field(default="feedback", pattern=r"^[A-Za-z0-9 _.:-]{1,50}(,[A-Za-z0-9 _.:-]{1,50}){0,9}$")
    # Fields sent to an external tracker beyond category, ids and the tool-call summary.
    tracker_include_body: bool = False
    tracker_include_message_text: bool = False

    # The SREs' trace view (issue 24): a URL template with `{trace_id}` (e.g. Jaeger
    # `https://jaeger.example/trace/{trace_id}`, Grafana Tempo's explore URL, Phoenix's trace page) put into
    # every ticket and every report (Feedback.trace_url, shown by the console). Empty: no link. A backend's
    # API key never goes into a link: the trace UI authenticates its viewer itself.
    trace_url_template: str = Field(default="", pattern=r"^$|^https?://[^\s]*\{trace_id\}[^\s]*$")

    # Change feed (WatchFeedback, issue 24): days its events are kept (at least 14); a resume token older
    # than that is OUT_OF_RANGE naming the oldest position still available.
    feed_retention_days: int = Field(default=14, ge=14)
    # Change feed: seconds between two messages of an idle stream (a heartbeat keeps proxies from closing
    # it: Envoy's stream_idle_timeout is 300 s here, load balancers often 60 s).
    feed_heartbeat_s: float = Field(default=15.0, gt=0, le=240)
    # Change feed: events one stream reads per query (its memory bound: one page).
    feed_page_size: int = Field(default=100, ge=1, le=1000)
    # Change feed: seconds between two retention passes (each replica runs them; one deletes, the others
    # find nothing).
    feed_prune_interval_s: float = Field(default=3600.0, gt=0)

    # Webhooks (issue 24): Fernet key (44 URL-safe base64 characters, `Fernet.generate_key()`) encrypting the
    # subscriptions' signing secrets at rest; the same on every replica. Empty: derived from the HS256 dev
    # secret (embedded / dev only; set it in production).
    webhook_key: SecretStr = SecretStr("")
    # Webhooks: seconds one delivery attempt may take (no 2xx by then: failed, retried).
    webhook_timeout_s: float = Field(default=10.0, gt=0, le=60)
    # Webhooks: attempts at one event before the subscription is DEAD_LETTERED (until ResumeWebhookSubscription).
    webhook_max_attempts: int = Field(default=30, ge=1, le=1000)
    # Webhooks: first retry delay in seconds; doubles per attempt up to webhook_backoff_max_s (defaults: 1 s
    # to 5 min, 30 attempts ≈ 2 h, so a receiver down for an hour gets everything).
    webhook_backoff_first_s: float = Field(default=1.0, gt=0)
    webhook_backoff_max_s: float = Field(default=300.0, gt=0)
    # Webhooks: also deliver to private addresses (10/8, 172.16/12, 192.168/16, fc00::/7, 100.64/10; names that
    # resolve to loopback), for receivers on the deployment's private network. Off: public addresses only, plus
    # loopback as a literal address or `localhost`. Link-local (169.254.169.254, the cloud metadata endpoint),
    # multicast, unspecified and reserved addresses are refused either way (services/feedback/webhook_addresses.py).
    webhook_allow_private_networks: bool = False

    @model_validator(mode="after")
    def _github_needs_its_repository(self) -> FeedbackSettings:
        if self.tracker == "github" and not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", self.tracker_github_repo):
            raise ValueError("AGENTFEEDBACK_FEEDBACK_TRACKER=github needs AGENTFEEDBACK_FEEDBACK_TRACKER_GITHUB_REPO "
                             f"as owner/name (got {self.tracker_github_repo!r}); set it, or use the markdown tracker")
        return self
