from keel_stream.cli import main

main()
