"""servepack.smoke"""
