# Multi-stage build: a static promptgate binary on a distroless base, running as non-root.
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
ENV PROMPTGATE_DB=/data/promptgate.db
EXPOSE 8787 8788
ENTRYPOINT ["/usr/local/bin/promptgate"]
CMD ["serve"]
