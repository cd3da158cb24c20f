"""Stage 6, publishing: verified, checksummed, signed images copied atomically into a site
folder, with a catalogue, Lmod module files and exec wrappers; and ``verify`` of that folder."""
