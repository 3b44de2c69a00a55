// The Go peer for the intake benchmark (issue 32), written the way a user
// would: net/http, HMAC-SHA256 over the raw body checked against
// X-Hub-Signature-256 in constant time, encoding/json to reject non-JSON, and
// a franz-go produce (idempotent, acks=all, lz4) awaited before the 202.
// It answers exactly as tools/bench/node-peer/server.mjs does: same route,
// same status codes and bodies, same record key and headers.
//
//	go-peer PORT_FILE BOOTSTRAP SECRET TOPIC
package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

const deliveryTimeout = 5 * time.Second

// reply writes a JSON body like the Node peer's JSON.stringify (field order
// kept, no HTML escaping).
func reply(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(body) // The client may be gone; nothing to do about it.
}

type errorBody struct {
	Error string `json:"error"`
}

type acceptedBody struct {
	Status     string `json:"status"`
	DeliveryID string `json:"delivery_id"`
}

// payload holds the one field the record key comes from. FullName is an
// `any`, not a *string: encoding/json allocates a *string before it sees a
// number there, which would key the record by "" instead of the delivery id.
type payload struct {
	Repository struct {
		FullName any `json:"full_name"`
	} `json:"repository"`
}

func main() {
	if len(os.Args) != 5 {
		log.Fatalf("usage: %s PORT_FILE BOOTSTRAP SECRET TOPIC", os.Args[0])
	}
	portFile, bootstrap, secret, topic := os.Args[1], os.Args[2], []byte(os.Args[3]), os.Args[4]

	// franz-go's defaults are already idempotent with acks=all; they are spelled
	// out because the benchmark compares exactly this configuration. Linger is
	// relay-intake's default (1 ms) rather than franz-go's (10 ms): every answer
	// waits for the ack, so linger is latency, and the peer should not lose on
	// a default relay-intake does not share. The delivery timeout is
	// relay-intake's too (kafka.delivery_timeout): franz-go would otherwise
	// retry a record forever, and the caller must get its 503 (GitHub gives
	// up after 10 s).
	client, err := kgo.NewClient(
		kgo.SeedBrokers(strings.Split(bootstrap, ",")...),
		kgo.ClientID("go-peer"),
		kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(kgo.Lz4Compression()),
		kgo.ProducerLinger(time.Millisecond),
		kgo.RecordDeliveryTimeout(deliveryTimeout),
	)
	if err != nil {
		log.Fatalf("kafka client: %v", err)
	}
	// Like the Node peer's producer.connect(): fail before listening if the
	// broker is unreachable.
	pingCtx, cancelPing := context.WithTimeout(context.Background(), 10*time.Second)
	if err := client.Ping(pingCtx); err != nil {
		log.Fatalf("kafka %s: %v", bootstrap, err)
	}
	cancelPing()

	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// RequestURI is the raw request target, as Node's req.url: a query
		// string makes it another route.
		if r.Method != http.MethodPost || r.RequestURI != "/github/webhook" {
			reply(w, http.StatusNotFound, errorBody{"not found"})
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return // The connection broke mid-body; net/http closes it.
		}
		// @octokit/webhooks compares the whole "sha256=<lowercase hex>" string
		// and refuses an empty body or signature.
		mac := hmac.New(sha256.New, secret)
		mac.Write(body)
		want := "sha256=" + hex.EncodeToString(mac.Sum(nil))
		got := r.Header.Get("X-Hub-Signature-256")
		if len(body) == 0 || !hmac.Equal([]byte(got), []byte(want)) {
			reply(w, http.StatusUnauthorized, errorBody{"bad signature"})
			return
		}
		event, delivery := r.Header.Get("X-GitHub-Event"), r.Header.Get("X-GitHub-Delivery")
		if event == "" || delivery == "" {
			reply(w, http.StatusBadRequest, errorBody{"missing headers"})
			return
		}
		// One pass validates and extracts the key. A type mismatch (an array
		// body, a non-object repository) is still valid JSON: it leaves
		// FullName nil, and the key falls back to the delivery id as the Node
		// peer's `payload?.repository?.full_name ?? delivery` does.
		var p payload
		var typeErr *json.UnmarshalTypeError
		if err := json.Unmarshal(body, &p); err != nil && !errors.As(err, &typeErr) {
			reply(w, http.StatusBadRequest, errorBody{"not json"})
			return
		}
		key := delivery
		if name, ok := p.Repository.FullName.(string); ok {
			key = name
		}
		rec := &kgo.Record{
			Key:   []byte(key),
			Value: body,
			Headers: []kgo.RecordHeader{
				{Key: "relay-delivery-id", Value: []byte(delivery)},
				{Key: "relay-event", Value: []byte(event)},
			},
		}
		// 202 only after the broker acknowledged the record. The wait has its
		// own bound: with the broker gone, an idempotent record that was
		// already sent is kept (and retried) past RecordDeliveryTimeout.
		acked := make(chan error, 1)
		client.Produce(r.Context(), rec, func(_ *kgo.Record, err error) { acked <- err })
		timer := time.NewTimer(deliveryTimeout)
		defer timer.Stop()
		select {
		case err := <-acked:
			if err != nil {
				reply(w, http.StatusServiceUnavailable, errorBody{err.Error()})
				return
			}
		case <-timer.C:
			reply(w, http.StatusServiceUnavailable, errorBody{"no broker ack within " + deliveryTimeout.String()})
			return
		}
		reply(w, http.StatusAccepted, acceptedBody{"accepted", delivery})
	})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatalf("listen: %v", err)
	}
	srv := &http.Server{Handler: handler, IdleTimeout: 60 * time.Second}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := os.WriteFile(portFile, []byte(fmt.Sprintf("%d\n", port)), 0o644); err != nil {
		log.Fatalf("port file: %v", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Fatalf("serve: %v", err)
		}
	}()
	<-ctx.Done()
	// Like the Node peer: stop listening, close the producer, exit 0.
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	client.Close()
}
