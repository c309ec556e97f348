"""synattn parser service: parser backends, REST API and batch parsing into shards."""
