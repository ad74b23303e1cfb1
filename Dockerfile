# Multi-stage build: a static promptgate binary on a distroless base, running as non-root.
# What the container listens on, and how to reach its admin listener: README, "Docker".
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/promptgate ./cmd/promptgate \
 && mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/promptgate /usr/local/bin/promptgate
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
# The proxy listener answers on every interface of the container; the admin listener keeps its loopback
# default (reachable with `docker exec`) until PROMPTGATE_ADMIN_LISTEN and PROMPTGATE_ADMIN_TOKEN are set.
ENV PROMPTGATE_DB=/data/promptgate.db \
    PROMPTGATE_LISTEN=0.0.0.0:8787
EXPOSE 8787
# Exec form: distroless has no shell. healthcheck asks /healthz at PROMPTGATE_LISTEN, as serve reads it.
HEALTHCHECK --interval=30s --timeout=5s --start-period=15s --retries=3 \
  CMD ["/usr/local/bin/promptgate", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/promptgate"]
CMD ["serve"]
