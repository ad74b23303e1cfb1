package main

import (
	"bytes"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
)

// baselineMaxBody is the baseline's request size cap, promptgate's default.
const baselineMaxBody = 10 << 20

// baseline is the bare reverse proxy promptgate is measured against: it reads the whole request
// body first (as promptgate must, to rewrite it), then hands it to an httputil.ReverseProxy as its
// zero value configures it (FlushInterval 0: an answer of known length is written without flushes
// of its own, a stream — text/event-stream or a body of unknown length — is still flushed at every
// write). It uses the same upstream transport settings as promptgate, so that only promptgate's own
// work differs.
type baseline struct {
	rp *httputil.ReverseProxy
}

// newBaseline is the bare proxy to upstream over tr (promptgate's upstream transport).
func newBaseline(upstream *url.URL, tr http.RoundTripper) *baseline {
	return &baseline{rp: &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			pr.Out.Host = ""
		},
		Transport: tr,
		ErrorLog:  log.New(io.Discard, "", 0),
	}}
}

func (b *baseline) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Room for the whole body and the MinRead that bytes.Buffer.ReadFrom wants free before each
	// read, so that a body of the announced length is read into one allocation, without a copy.
	size := 4096
	if r.ContentLength > 0 && r.ContentLength <= baselineMaxBody {
		size = int(r.ContentLength) + bytes.MinRead
	}
	buf := bytes.NewBuffer(make([]byte, 0, size))
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, baselineMaxBody)); err != nil {
		http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
		return
	}
	body := buf.Bytes()
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.Header.Set("Content-Length", strconv.Itoa(len(body)))
	b.rp.ServeHTTP(w, r)
}
