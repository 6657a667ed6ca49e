// SPDX-License-Identifier: MIT
// iscsi/initiator/transport.h - what an iSCSI initiator session needs from its transport:
// connect, send whole PDUs in order, hand back received PDUs, fail cleanly.
//
// The session (iscsi/initiator/session.h) speaks PDUs; a transport moves them. TCP
// (iscsi/initiator/tcp.cc) writes them to a byte stream and cuts the incoming stream into
// PDUs with PduReader; iSER (iser/initiator/initiator.h) carries control PDUs in SEND messages and
// moves SCSI data by RDMA, which is why the interface is at the PDU level and the session
// never touches a socket.
//
// Ownership: the session owns every TxPdu. queue() lends it to the transport, which hands
// it back through TransportSink::on_sent() once its last byte is written, or with
// sent=false when the connection closes first. A TxPdu's data may point into a caller's
// SCSI buffer (zero-copy Data-Out): the session keeps the command alive until then.
//
// Threading: none. A transport is driven by the thread that drives its session; poll()
// is the only place it waits, and it never waits longer than it is told.
#pragma once

#include "iscsi/params.h"
#include "iscsi/pdu.h"

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace ulp::iscsi::initiator
{

// One PDU to send: header part, data segment, trailer, written in that order.
struct TxPdu {
	std::array<uint8_t, kBhsLen + kMaxAhsLen + kDigestLen> hdr; // BHS, AHS, header digest
	uint16_t hdr_len = 0;                                       // bytes of hdr used
	std::span<const uint8_t> data;    // the data segment: a caller's buffer or own
	std::vector<uint8_t> own;         // data this PDU carries itself (text, ping data)
	std::array<uint8_t, 8> trailer{}; // padding and data digest
	uint8_t trailer_len = 0;          // bytes of trailer used
	uint32_t slot = kReservedTag;     // the session's task slot it belongs to (bookkeeping)
	bool ends_r2t = false;            // the last Data-Out answering an R2T
	size_t sent = 0;                  // bytes written so far (transport)

	size_t total() const { return hdr_len + data.size() + trailer_len; }
};

// Data direction of a SCSI command (bidirectional commands are not supported).
enum class DataDir : uint8_t { None, Read, Write };

// The session's side of a transport.
class TransportSink
{
public:
	virtual ~TransportSink() = default;
	// A PDU arrived: err is None, or the non-fatal BadAhs / DataDigest (pdu.h). The views
	// are valid during the call only.
	virtual void on_pdu(const Pdu &pdu, PduError err) = 0;
	// A queued PDU was written (sent) or dropped because the connection closed.
	virtual void on_sent(TxPdu *p, bool sent) = 0;
	// The data registration of command itt (map_data) is gone: the peer can no longer
	// touch the buffer (RDMA transports; from poll(), unmap_data or close()).
	virtual void on_data_released(uint32_t itt) {}
};

class InitiatorTransport
{
public:
	virtual ~InitiatorTransport() = default;

	virtual Transport kind() const = 0;
	// Where received PDUs and send completions go (set before connect).
	virtual void attach(TransportSink *sink) = 0;
	// Connect to host:port within timeout. False with why() on failure.
	virtual bool connect(const std::string &host, uint16_t port,
	                     std::chrono::milliseconds timeout) = 0;
	// Lend p for sending, after every PDU queued before it.
	virtual void queue(TxPdu *p) = 0;
	// Write what can be written, read what has arrived (delivering PDUs and send
	// completions to the sink), waiting at most timeout for something to happen. False once
	// the connection has failed or closed (why() says why); queued PDUs have been handed
	// back by then.
	virtual bool poll(std::chrono::milliseconds timeout) = 0;
	// The largest data segment we accept and the digests present, for the next PDU header
	// on (the login result applies from the first full feature phase PDU).
	virtual void set_recv(uint32_t max_recv_dsl, Digests d) = 0;
	// Close now; queued PDUs are handed back (sent=false). Idempotent.
	virtual void close() = 0;
	virtual bool connected() const = 0;
	// Why the connection failed or closed.
	virtual const std::string &why() const = 0;
	// "host:port" of the local end and of the peer (logs).
	virtual std::string local_address() const = 0;
	virtual std::string peer_address() const = 0;

	// ---- Data by RDMA (iSER, RFC 7145 7.3). TCP moves data in Data-In and Data-Out PDUs
	// and keeps these defaults.
	// The target moves SCSI data with RDMA READ and WRITE: no R2T, no solicited Data-Out
	// and no Data-In on this connection; a SCSI Response's residual says what moved.
	virtual bool rdma_data() const { return false; }
	// Login values the transport dictates (iSER: the lengths its buffers were sized for).
	virtual void login_prefs(OperationalPrefs &prefs) {}
	// The largest data buffer of one command; 0: no limit.
	virtual uint32_t max_data_len() const { return 0; }
	// One more command's data could be registered now (the bound on commands in flight).
	virtual bool can_map() const { return true; }
	// Register data for command itt before its SCSI Command PDU is queued (the PDU then
	// carries the registration); its first unsol bytes go as immediate or unsolicited
	// data. 0; -EAGAIN: nothing free now, retry after a release; another negative errno:
	// this buffer can never be mapped.
	virtual int map_data(uint32_t itt, DataDir dir, std::span<uint8_t> data, uint32_t unsol)
	{
		return 0;
	}
	// Command itt ended: revoke the peer's access to its buffer, then report
	// on_data_released(itt) (now or from a later poll()/close()).
	virtual void unmap_data(uint32_t itt) {}
};

// iSCSI over TCP. hard_cap bounds the largest data segment ever accepted (the reader's
// buffer): what we declare as MaxRecvDataSegmentLength must not exceed it.
std::unique_ptr<InitiatorTransport> make_tcp_transport(uint32_t hard_cap = 1u << 20);

} // namespace ulp::iscsi::initiator
