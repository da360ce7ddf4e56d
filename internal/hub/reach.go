package hub

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"
)

// ErrUnreachable marks a pull that gave up because the Hub could not be
// reached (no name lookup, no route, refused, no secure connection, no
// answer in time).
var ErrUnreachable = errors.New("hub: the Hub cannot be reached")

// listingTimeout bounds one attempt at the listing, so a network that
// drops packets is reported as a timeout in seconds rather than after the
// system's connect timeout and retries.
const listingTimeout = 20 * time.Second

// Reasons a connection failed, as [Diagnose] names them.
const (
	ReasonDNS     = "dns"
	ReasonNoRoute = "no_route"
	ReasonRefused = "refused"
	ReasonTLS     = "tls"
	ReasonTimeout = "timeout"
	ReasonServer  = "server"
	ReasonNetwork = "network"
)

// Diagnosis is a failed connection said for people: Reason is one of the
// Reason constants, Message plain words, Detail the error behind them.
type Diagnosis struct {
	Reason, Message, Detail string
	// Unreachable says the Hub was not reached at all (as opposed to an
	// answer that was an error, or a connection that broke).
	Unreachable bool
}

// Diagnose says why err, a pull's transport failure, happened.
func Diagnose(err error) Diagnosis {
	d := Diagnosis{Detail: err.Error(), Unreachable: true}
	var dns *net.DNSError
	var certErr *tls.CertificateVerificationError
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var recordErr tls.RecordHeaderError
	var netErr net.Error
	var status *statusFailure
	switch {
	case errors.As(err, &status):
		d.Reason, d.Unreachable = ReasonServer, false
		d.Message = fmt.Sprintf("The Hub answered %s; it may be busy or down for a while.", status.status)
	case errors.As(err, &dns):
		d.Reason = ReasonDNS
		d.Message = fmt.Sprintf("The Hub's address %s cannot be looked up: this computer seems to be offline, or its DNS is not working.", dns.Name)
	case errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.EHOSTUNREACH):
		d.Reason = ReasonNoRoute
		d.Message = "There is no network route to the Hub: this computer seems to be offline."
	case errors.Is(err, syscall.ECONNREFUSED):
		d.Reason = ReasonRefused
		d.Message = "The Hub refused the connection: a firewall or proxy may be in the way, or HF_ENDPOINT names the wrong address."
	case errors.As(err, &certErr) || errors.As(err, &unknownCA) || errors.As(err, &hostErr) || errors.As(err, &recordErr):
		d.Reason = ReasonTLS
		d.Message = "A secure connection to the Hub could not be made: a proxy may be intercepting HTTPS, or this computer's clock is wrong."
	case errors.Is(err, ErrStalled) || errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout()):
		d.Reason = ReasonTimeout
		d.Message = "The Hub did not answer in time: the network may be down or very slow."
	default:
		d.Reason, d.Unreachable = ReasonNetwork, false
		d.Message = "The connection to the Hub failed."
	}
	return d
}

// quickOfflineRetries are the retries of a listing that did not reach the
// Hub at all, under Options.QuickOffline: one, a RetryBase later, rides
// over a network that is just coming up.
const quickOfflineRetries = 1

// notReached reports whether err says the Hub was not reached at all in a way
// waiting seconds rarely mends: no name lookup, no route, a refusal. A
// timeout or an error answer may pass, and keeps its retries.
func notReached(err error) bool {
	switch Diagnose(err).Reason {
	case ReasonDNS, ReasonNoRoute, ReasonRefused:
		return true
	}
	return false
}

// statusFailure is an error answer worth retrying (429, 5xx).
type statusFailure struct{ status string }

func (s *statusFailure) Error() string { return s.status }

// unreachable marks err, the last failure before a pull gave up, with
// ErrUnreachable when it says the Hub was never reached.
func unreachable(err error) error {
	if d := Diagnose(err); d.Unreachable {
		return fmt.Errorf("%w: %s (%w)", ErrUnreachable, d.Message, err)
	}
	return err
}
