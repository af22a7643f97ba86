module example.com/my-app

go 1.26

require github.com/coder/websocket v1.8.14
