# syntax=docker/dockerfile:1
# One image holding tally's three binaries; the Deployments in config/ pick
# one with `command`.   docker build -t tally:e2e .

FROM golang:1.26 AS build
WORKDIR /src
# Modules first, so that a source change reuses the downloaded modules.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
ARG TARGETOS
ARG TARGETARCH
# The version stamped into the binaries (`tally version`): make image passes
# it; without it, the chart's appVersion.
ARG VERSION
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    VERSION=${VERSION:-$(awk '/^appVersion:/ {gsub(/"/, "", $2); print $2}' charts/tally/Chart.yaml)} && \
    CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags="-s -w -X github.com/tally-dev/tally/internal/version.Version=${VERSION}" -o /out/ \
      ./cmd/tally-scanner ./cmd/tally-merger ./cmd/tally

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/tally-scanner /out/tally-merger /out/tally /usr/local/bin/
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/tally"]
