module example.com/my-app

go 1.26
