module petal

go 1.26
