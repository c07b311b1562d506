package amqpforward

// ConnectionLost reports whether p holds no open connection: the client
// has seen its last one go.
func ConnectionLost(p *Publisher) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conn == nil || p.conn.IsClosed()
}

// HeaderFrameSize is headerFrameSize.
var HeaderFrameSize = headerFrameSize
