// Empty: `import os.log` needs the submodule to exist; Logger is in the Swift overlay.
