module github.com/deepx/deepx-go

go 1.19
